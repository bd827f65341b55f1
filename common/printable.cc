#include "common/printable.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ringtrain {

std::pair<uint32_t, size_t> DecodeUtf8(absl::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char lead = b(0);
  if (lead < 0x80) return {lead, 1};
  size_t n = 0;
  uint32_t cp = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {  // 0xc0 and 0xc1 could only start overlong forms
    n = 2;
    cp = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3;
    cp = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4;
    cp = lead & 0x07;
  } else {
    return {0, 0};
  }
  if (i + n > text.size()) return {0, 0};
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return {0, 0};
    cp = (cp << 6) | (b(k) & 0x3f);
  }
  const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
  if (overlong || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return {0, 0};
  return {cp, n};
}

std::string EscapeForTerminal(absl::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto [cp, length] = DecodeUtf8(text, i);
    if (length == 0) {
      out += absl::StrFormat("\\x%02x", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (keep_newlines && (cp == '\n' || cp == '\t')) {
      out += static_cast<char>(cp);
    } else if (IsUnprintable(cp)) {
      out += cp < 0x80 ? absl::StrFormat("\\x%02x", cp) : absl::StrFormat("\\u%04x", cp);
    } else {
      out.append(text.data() + i, length);
    }
    i += length;
  }
  return out;
}

std::string ValidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t length = DecodeUtf8(text, i).second;
    if (length == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
      continue;
    }
    out.append(text.data() + i, length);
    i += length;
  }
  return out;
}

absl::string_view Utf8Prefix(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  // Back up over continuation bytes (10xxxxxx) to the start of the character the cut falls in.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;
  return text.substr(0, end);
}

std::string Excerpt(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  return absl::StrCat(Utf8Prefix(text, max_bytes), "\xe2\x80\xa6 (", text.size(), " bytes)");
}

}  // namespace ringtrain
