// GPT-2's byte-level alphabet: every byte value is shown as one printable Unicode character, so a
// byte-level BPE vocabulary (Hugging Face's tokenizer.json) can store arbitrary bytes as JSON
// strings ("Ġ" is the space byte 0x20). The tokenizer works on raw bytes; this converts the
// vocabulary's strings back to them once, when it is loaded, and gives an added token the bytes
// Hugging Face's ByteLevel decoder gives it. Torch-free.
#ifndef RINGTRAIN_COMMON_TOKENIZER_BYTE_LEVEL_H_
#define RINGTRAIN_COMMON_TOKENIZER_BYTE_LEVEL_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ringtrain {

// The character (UTF-8) GPT-2's bytes_to_unicode shows `byte` as.
std::string ByteLevelChar(unsigned char byte);

// The bytes a string of byte-level characters stands for; nullopt when it holds a character that
// is not one of the 256 (or is not valid UTF-8).
std::optional<std::string> ByteLevelDecode(absl::string_view shown);

// What Hugging Face's ByteLevel decoder makes of one token: ByteLevelDecode(token) when every
// character is in the alphabet, else the token's own bytes unchanged. It applies the rule to added
// tokens too, so an added "Ġfoo" decodes to " foo" while "<s x>" (a raw space) stays as written.
std::string ByteLevelDecoderBytes(absl::string_view token);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_TOKENIZER_BYTE_LEVEL_H_
