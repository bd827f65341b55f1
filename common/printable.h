// Text that prints as itself on a terminal: valid UTF-8 with no C0 or C1 control character and no
// bidirectional override. The coordinator admits only such job names; ringctl escapes everything
// else in what it prints, so a string from the server (or stored before the check existed) cannot
// move the cursor, retitle the terminal, or make the text after it read in another order.
#ifndef RINGTRAIN_COMMON_PRINTABLE_H_
#define RINGTRAIN_COMMON_PRINTABLE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace ringtrain {

// The code point of the UTF-8 sequence at text[i] (i < text.size()) and its length in bytes;
// length 0 for an invalid sequence (truncated, overlong, a surrogate, or past U+10FFFF).
std::pair<uint32_t, size_t> DecodeUtf8(absl::string_view text, size_t i);

// U+0000-U+001F and U+007F-U+009F.
inline bool IsControl(uint32_t code_point) {
  return code_point < 0x20 || (code_point >= 0x7f && code_point <= 0x9f);
}

// The bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): invisible,
// they reorder the text that follows them up to the end of the line ("Trojan Source"), so a name
// could show as another name, or move the columns after it.
inline bool IsBidiControl(uint32_t code_point) {
  return (code_point >= 0x202a && code_point <= 0x202e) ||
         (code_point >= 0x2066 && code_point <= 0x2069);
}

// What EscapeForTerminal escapes and a job name must not hold: a control or a bidi control.
inline bool IsUnprintable(uint32_t code_point) {
  return IsControl(code_point) || IsBidiControl(code_point);
}

// `text` with every control character and every byte of invalid UTF-8 written as \xNN (a control
// character above U+007F, or a bidi control, as \u0085 or \u202e); everything else, backslashes
// included, as it is. With `keep_newlines`, '\n' and '\t' stay as they are (multi-line messages,
// stderr tails).
std::string EscapeForTerminal(absl::string_view text, bool keep_newlines = false);

// `text` as valid UTF-8: each byte that does not start a valid sequence becomes U+FFFD (the
// replacement character); everything else is kept. Protobuf refuses to parse a `string` field that
// is not valid UTF-8, so text from a trainer (its stderr) passes through here before it goes on
// the wire or into the store.
std::string ValidUtf8(absl::string_view text);

// The longest prefix of `text` of at most `max_bytes` bytes that does not end inside a UTF-8
// sequence (a cut that would split a character drops the whole character).
absl::string_view Utf8Prefix(absl::string_view text, size_t max_bytes);

// How much of a value an error message echoes. Any value a user sent (a config value, an override,
// a key, a job name, a path) is cut to this before it is quoted: gRPC carries a status message in
// at most 16 KiB of metadata, and a message over that reaches the client as RESOURCE_EXHAUSTED
// instead of the error; what is left is enough to recognise the value.
inline constexpr size_t kMaxEchoBytes = 160;

// `text` itself when it has at most `max_bytes` bytes; else its Utf8Prefix of `max_bytes` bytes
// followed by "… (N bytes)", N being the whole size. Cut before escaping, so that an escape is
// never split; the result is at most max_bytes + 25 bytes.
std::string Excerpt(absl::string_view text, size_t max_bytes = kMaxEchoBytes);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_PRINTABLE_H_
