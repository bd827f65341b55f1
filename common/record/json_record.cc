#include "common/record/json_record.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ringtrain {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::string FormatDouble17(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.17g", value);
}

JsonRecord& JsonRecord::Add(const std::string& key, double value) {
  fields_.emplace_back(key, FormatDouble17(value));
  return *this;
}

JsonRecord& JsonRecord::Add(const std::string& key, int64_t value) {
  fields_.emplace_back(key, absl::StrCat(value));
  return *this;
}

JsonRecord& JsonRecord::Add(const std::string& key, const std::string& value) {
  fields_.emplace_back(key, JsonString(value));
  return *this;
}

JsonRecord& JsonRecord::AddRaw(const std::string& key, const std::string& json) {
  fields_.emplace_back(key, json);
  return *this;
}

std::string JsonRecord::str() const {
  return absl::StrCat("{",
                      absl::StrJoin(fields_, ", ",
                                    [](std::string* out, const auto& f) {
                                      absl::StrAppend(out, JsonString(f.first), ": ", f.second);
                                    }),
                      "}");
}

}  // namespace ringtrain
