#include "common/tokenizer/byte_level.h"

#include <array>
#include <utility>

namespace ringtrain {
namespace {

// bytes_to_unicode: the printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves; the other 68, in byte order, are shown as U+0100, U+0101, ...
std::array<char32_t, 256> MakeByteToCodepoint() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

const std::array<char32_t, 256>& ByteToCodepoint() {
  static const std::array<char32_t, 256> table = MakeByteToCodepoint();
  return table;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else {  // two bytes: the table's largest is U+0143
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

std::string ByteLevelChar(unsigned char byte) {
  std::string out;
  AppendUtf8(ByteToCodepoint()[byte], &out);
  return out;
}

std::optional<std::string> ByteLevelDecode(absl::string_view shown) {
  // Every code point of the table is below U+0144, so one or two UTF-8 bytes each.
  static const std::array<int, 0x144> codepoint_to_byte = [] {
    std::array<int, 0x144> inverse;
    inverse.fill(-1);
    for (int b = 0; b < 256; ++b) inverse[ByteToCodepoint()[b]] = b;
    return inverse;
  }();
  std::string bytes;
  bytes.reserve(shown.size());
  for (size_t i = 0; i < shown.size();) {
    const auto c = static_cast<unsigned char>(shown[i]);
    char32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < shown.size() &&
               (static_cast<unsigned char>(shown[i + 1]) & 0xC0) == 0x80) {
      cp = ((c & 0x1F) << 6) | (static_cast<unsigned char>(shown[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;
    }
    if (cp >= codepoint_to_byte.size() || codepoint_to_byte[cp] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(codepoint_to_byte[cp]));
  }
  return bytes;
}

std::string ByteLevelDecoderBytes(absl::string_view token) {
  std::optional<std::string> bytes = ByteLevelDecode(token);
  return bytes.has_value() ? *std::move(bytes) : std::string(token);
}

}  // namespace ringtrain
