// Bytes to valid UTF-8 the way Hugging Face's tokenizers (Rust's String::from_utf8_lossy) and
// tiktoken (Python's bytes.decode("utf-8", errors="replace")) do it when they decode ids: each
// maximal ill-formed subsequence becomes one U+FFFD (Unicode's "substitution of maximal subparts").
// So a truncated character ("\xE6\x9D", the first two bytes of "東") is one U+FFFD, while a byte
// that can never start or continue a character ("\xC0", or "\xE0\x80", an overlong prefix) is one
// U+FFFD per byte. common/printable.h's ValidUtf8 replaces every bad byte instead: different
// output, kept for what it serves. Torch-free.
#ifndef RINGTRAIN_COMMON_TOKENIZER_UTF8_LOSSY_H_
#define RINGTRAIN_COMMON_TOKENIZER_UTF8_LOSSY_H_

#include <string>

#include "absl/strings/string_view.h"

namespace ringtrain {

std::string Utf8Lossy(absl::string_view bytes);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_TOKENIZER_UTF8_LOSSY_H_
