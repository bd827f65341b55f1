// Text that prints as itself on a terminal: valid UTF-8 with no C0 or C1 control character. The
// coordinator admits only such job names; ringctl escapes everything else in what it prints, so a
// string from the server (or stored before the check existed) cannot move the cursor or retitle
// the terminal.
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

// `text` with every control character and every byte of invalid UTF-8 written as \xNN (a control
// character above U+007F as \u0085); everything else, backslashes included, as it is. With
// `keep_newlines`, '\n' and '\t' stay as they are (multi-line messages, stderr tails).
std::string EscapeForTerminal(absl::string_view text, bool keep_newlines = false);

// `text` as valid UTF-8: each byte that does not start a valid sequence becomes U+FFFD (the
// replacement character); everything else is kept. Protobuf refuses to parse a `string` field that
// is not valid UTF-8, so text from a trainer (its stderr) passes through here before it goes on
// the wire or into the store.
std::string ValidUtf8(absl::string_view text);

// The longest prefix of `text` of at most `max_bytes` bytes that does not end inside a UTF-8
// sequence (a cut that would split a character drops the whole character).
absl::string_view Utf8Prefix(absl::string_view text, size_t max_bytes);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_PRINTABLE_H_
