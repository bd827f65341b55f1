#include "common/safetensors/index.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace ringtrain {
namespace {

using nlohmann::json;

absl::Status Corrupt(const std::string& source, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(source, ": not a valid safetensors index (",
                                          kSafetensorsIndexFileName, "): ", what));
}

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string("/\0", 2)) == std::string::npos;
}

}  // namespace

absl::StatusOr<SafetensorsIndex> SafetensorsIndex::Parse(absl::string_view text,
                                                         const std::string& source) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Corrupt(source, absl::StrCat("not JSON: ", e.what()));
  }
  if (!root.is_object()) return Corrupt(source, "not a JSON object");
  SafetensorsIndex index;
  if (root.contains("metadata") && !root["metadata"].is_null()) {
    const json& metadata = root["metadata"];
    if (!metadata.is_object()) return Corrupt(source, "\"metadata\" is not a JSON object");
    if (metadata.contains("total_size")) {
      const json& total = metadata["total_size"];
      if (!total.is_number_unsigned()) {
        return Corrupt(source, absl::StrCat("metadata.total_size is ", total.dump(),
                                            ", not a non-negative integer"));
      }
      index.total_size = total.get<uint64_t>();
    }
  }
  if (!root.contains("weight_map")) return Corrupt(source, "it has no \"weight_map\"");
  const json& weight_map = root["weight_map"];
  if (!weight_map.is_object()) return Corrupt(source, "\"weight_map\" is not a JSON object");
  for (const auto& [name, file] : weight_map.items()) {
    if (!file.is_string()) {
      return Corrupt(source, absl::StrCat("weight_map[\"", name, "\"] is ", file.type_name(),
                                          ", not a file name"));
    }
    std::string shard = file.get<std::string>();
    if (!IsPlainFileName(shard)) {
      return Corrupt(source, absl::StrCat("weight_map[\"", name, "\"] is \"", shard,
                                          "\", not the name of a file in the index's folder"));
    }
    index.weight_map[name] = std::move(shard);
  }
  return index;
}

std::string SafetensorsIndex::ToJson() const {
  // nlohmann's json keeps object keys sorted, as sort_keys=True does.
  json root = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  return root.dump(2, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace) + "\n";
}

std::vector<std::vector<size_t>> PlanShards(const std::vector<uint64_t>& tensor_bytes,
                                            uint64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_bytes = 0;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    const uint64_t bytes = tensor_bytes[i];
    if (bytes > max_shard_bytes) {
      shards.push_back({i});
      continue;
    }
    if (current_bytes + bytes > max_shard_bytes) {  // both <= the cap: no overflow
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes;
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

std::string ShardFileName(size_t i, size_t n) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buffer;
}

absl::StatusOr<uint64_t> ParseShardSize(absl::string_view text) {
  const auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "size \"", text, "\" ", why,
        ": use a number of bytes (\"2000000000\") or an integer with a unit: KB, MB, GB (powers "
        "of 10, e.g. \"5GB\") or KiB, MiB, GiB (powers of 2, e.g. \"2GiB\")"));
  };
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  struct Unit {
    absl::string_view suffix;
    uint64_t scale;
  };
  // The binary units first: "GIB" also ends in "B".
  static constexpr Unit kUnits[] = {{"GIB", 1ull << 30}, {"MIB", 1ull << 20}, {"KIB", 1ull << 10},
                                    {"GB", 1000000000},  {"MB", 1000000},     {"KB", 1000}};
  absl::string_view number = trimmed;
  uint64_t scale = 1;
  bool bits = false;
  const std::string upper = absl::AsciiStrToUpper(trimmed);
  for (const Unit& unit : kUnits) {
    if (absl::EndsWith(upper, unit.suffix)) {
      number = absl::StripAsciiWhitespace(trimmed.substr(0, trimmed.size() - unit.suffix.size()));
      scale = unit.scale;
      // transformers: "5Gb" (a lower-case final b, decimal units only) is in bits.
      bits = unit.suffix.size() == 2 && trimmed.back() == 'b';
      break;
    }
  }
  if (number.empty() || !std::all_of(number.begin(), number.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
      })) {
    return invalid("is not a size");
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(number, &value) || __builtin_mul_overflow(value, scale, &value)) {
    return invalid("is too large");
  }
  if (bits) value /= 8;
  if (value == 0) return invalid("is zero");
  return value;
}

}  // namespace ringtrain
