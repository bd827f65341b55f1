#include "common/tokenizer/utf8_lossy.h"

namespace ringtrain {

std::string Utf8Lossy(absl::string_view bytes) {
  constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    if (lead < 0x80) {
      out.push_back(static_cast<char>(lead));
      ++i;
      continue;
    }
    // How many continuation bytes the lead needs, and the range the first of them must fall in
    // (Unicode's table of well-formed sequences: it excludes overlongs, surrogates, > U+10FFFF).
    int need = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      need = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      need = 2;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      need = 3;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    }
    size_t end = i + 1;
    int have = 0;
    while (have < need && end < bytes.size()) {
      const auto next = static_cast<unsigned char>(bytes[end]);
      if (next < low || next > high) break;
      low = 0x80;
      high = 0xBF;
      ++end;
      ++have;
    }
    if (need > 0 && have == need) {
      out.append(bytes.data() + i, end - i);
    } else {
      out.append(kReplacement.data(), kReplacement.size());  // the lead and what it had so far
    }
    i = end;
  }
  return out;
}

}  // namespace ringtrain
