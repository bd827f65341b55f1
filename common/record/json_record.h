// Writing one JSON object with floats that round-trip exactly ("%.17g"; a non-finite value as JSON
// null), keys in the order they are added. What the trainer's step record and the bench reports
// are written with; nlohmann reads them back.
#ifndef RINGTRAIN_COMMON_RECORD_JSON_RECORD_H_
#define RINGTRAIN_COMMON_RECORD_JSON_RECORD_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ringtrain {

std::string FormatDouble17(double value);  // "%.17g"; non-finite values as JSON null

class JsonRecord {
 public:
  JsonRecord& Add(const std::string& key, double value);
  JsonRecord& Add(const std::string& key, int64_t value);
  JsonRecord& Add(const std::string& key, const std::string& value);
  // `json` is already JSON text (an array or object), inserted as is.
  JsonRecord& AddRaw(const std::string& key, const std::string& json);
  std::string str() const;  // "{...}" without a newline

 private:
  std::vector<std::pair<std::string, std::string>> fields_;  // key → JSON text
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_RECORD_JSON_RECORD_H_
