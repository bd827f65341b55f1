// The header: parsing with the Rust crate's checks, and the writer's serialisation.
#include "common/safetensors/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace ringtrain {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors files are little-endian; the reader copies bytes as they are");

using nlohmann::json;

constexpr absl::string_view kMetadataKey = "__metadata__";

absl::Status Corrupt(const std::string& source, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(source, ": not a valid safetensors file: ", what));
}

// The dtypes of the format (the Rust crate's Dtype) that ringtrain does not read.
bool IsOtherSafetensorsDtype(absl::string_view name) {
  static const std::set<std::string, std::less<>> kOthers = {
      "BOOL", "U8",  "I8", "I16",     "U16",     "I32",     "U32",     "I64",    "U64",
      "F64",  "C64", "F4", "F6_E2M3", "F6_E3M2", "F8_E5M2", "F8_E4M3", "F8_E8M0"};
  return kOthers.count(name) != 0;
}

bool ParseDtype(absl::string_view name, TensorDtype* out) {
  for (TensorDtype d : {TensorDtype::kF32, TensorDtype::kBF16, TensorDtype::kF16}) {
    if (TensorDtypeName(d) == name) {
      *out = d;
      return true;
    }
  }
  return false;
}

// A JSON integer in [0, 2^64): nlohmann reads non-negative integers as unsigned.
bool AsUnsigned(const json& value, uint64_t* out) {
  if (!value.is_number_unsigned()) return false;
  *out = value.get<uint64_t>();
  return true;
}

// One tensor's entry: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}; other keys
// are ignored, as the Rust crate ignores them.
absl::StatusOr<TensorEntry> ParseEntry(const std::string& name, const json& value,
                                       const std::string& source) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!value.is_object()) return Corrupt(source, absl::StrCat(where, " is not a JSON object"));
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) return Corrupt(source, absl::StrCat(where, " has no \"", key, "\""));
  }
  TensorEntry entry;
  entry.name = name;
  const json& dtype = value["dtype"];
  if (!dtype.is_string()) return Corrupt(source, absl::StrCat(where, ": dtype is not a string"));
  const std::string dtype_name = dtype.get<std::string>();
  if (!ParseDtype(dtype_name, &entry.dtype)) {
    if (IsOtherSafetensorsDtype(dtype_name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", where, " is ", dtype_name,
                       "; ringtrain reads F32, BF16 and F16 tensors (convert the file, e.g. "
                       "with transformers' save_pretrained in one of those dtypes)"));
    }
    return Corrupt(source, absl::StrCat(where, " has the unknown dtype \"", dtype_name,
                                        "\" (safetensors dtypes are F32, BF16, F16, F64, I64, …)"));
  }
  const json& shape = value["shape"];
  if (!shape.is_array()) return Corrupt(source, absl::StrCat(where, ": shape is not an array"));
  uint64_t numel = 1;
  for (const json& dim : shape) {
    uint64_t d = 0;
    if (!AsUnsigned(dim, &d) || d > static_cast<uint64_t>(INT64_MAX)) {
      return Corrupt(source, absl::StrCat(where, ": shape ", shape.dump(),
                                          " is not a list of non-negative integers"));
    }
    entry.shape.push_back(static_cast<int64_t>(d));
    if (__builtin_mul_overflow(numel, d, &numel)) {
      return Corrupt(source,
                     absl::StrCat(where, ": shape ", shape.dump(), " has more elements than 2^64"));
    }
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, TensorDtypeSize(entry.dtype), &nbytes)) {
    return Corrupt(source, absl::StrCat(where, ": shape ", shape.dump(), " of ", dtype_name,
                                        " has more bytes than 2^64"));
  }
  const json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !AsUnsigned(offsets[0], &entry.begin) ||
      !AsUnsigned(offsets[1], &entry.end)) {
    return Corrupt(source, absl::StrCat(where, ": data_offsets ", offsets.dump(),
                                        " is not [begin, end] (two non-negative integers)"));
  }
  if (entry.begin > entry.end) {
    return Corrupt(source, absl::StrCat(where, ": data_offsets [", entry.begin, ", ", entry.end,
                                        "] end before they begin"));
  }
  if (entry.end - entry.begin != nbytes) {
    return Corrupt(source, absl::StrCat(where, ": data_offsets [", entry.begin, ", ", entry.end,
                                        "] hold ", entry.end - entry.begin, " bytes but ",
                                        dtype_name, " ", shape.dump(), " needs ", nbytes));
  }
  return entry;
}

// The tensors sorted by offset must tile [0, file_size - data_start) exactly, as the Rust crate
// requires (Metadata::validate): no overlap, no hole, nothing after the last tensor.
absl::Status CheckLayout(std::vector<TensorEntry>& tensors, uint64_t data_start, uint64_t file_size,
                         const std::string& source) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t cursor = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& t : tensors) {
    if (t.begin < cursor) {
      return Corrupt(source, absl::StrCat("tensor '", t.name, "' [", t.begin, ", ", t.end,
                                          ") overlaps tensor '", previous->name, "' [",
                                          previous->begin, ", ", previous->end, ")"));
    }
    if (t.begin > cursor) {
      return Corrupt(source, absl::StrCat("bytes [", cursor, ", ", t.begin,
                                          ") of the data belong to no tensor (before tensor '",
                                          t.name, "'): tensors must cover the data contiguously"));
    }
    cursor = t.end;
    previous = &t;
  }
  const uint64_t data_bytes = file_size - data_start;
  if (cursor > data_bytes) {
    return Corrupt(source,
                   absl::StrCat("tensor '", previous->name, "' ends at data byte ", cursor,
                                " but the file holds ", data_bytes, " bytes of data (truncated?)"));
  }
  if (cursor < data_bytes) {
    return Corrupt(source, absl::StrCat("the tensors cover ", cursor, " bytes of data but the file",
                                        " holds ", data_bytes, " (", data_bytes - cursor,
                                        " bytes after the last tensor)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view TensorDtypeName(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kF32: return "F32";
    case TensorDtype::kBF16: return "BF16";
    case TensorDtype::kF16: return "F16";
  }
  return "?";
}

uint64_t TensorDtypeSize(TensorDtype dtype) { return dtype == TensorDtype::kF32 ? 4 : 2; }

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view bytes,
                                                         uint64_t file_size,
                                                         const std::string& source) {
  if (file_size < 8 || bytes.size() < 8) {
    return Corrupt(source, absl::StrCat("it has ", std::min<uint64_t>(file_size, bytes.size()),
                                        " bytes, fewer than the 8 of the header length"));
  }
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  if (length > kMaxSafetensorsHeaderBytes) {
    return Corrupt(source, absl::StrCat("the header length ", length, " is over the limit of ",
                                        kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (length > file_size - 8) {
    return Corrupt(source, absl::StrCat("the header length ", length, " is more than the ",
                                        file_size - 8, " bytes after it (truncated?)"));
  }
  if (length > bytes.size() - 8) {
    return Corrupt(source, absl::StrCat("only ", bytes.size() - 8, " bytes of the ", length,
                                        "-byte header were read"));
  }
  const absl::string_view text = bytes.substr(8, length);
  // As the Rust crate: '{' first, so that valid JSON is also an object.
  if (text.empty() || text[0] != '{') {
    return Corrupt(source, "the header is not a JSON object (it does not start with '{')");
  }
  // nlohmann keeps the last of duplicate keys; the callback sees each top-level key first.
  std::string duplicate;
  std::set<std::string> keys;
  const json::parser_callback_t note_keys = [&](int depth, json::parse_event_t event,
                                                json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && duplicate.empty() &&
        !keys.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), note_keys);
  } catch (const json::exception& e) {
    return Corrupt(source, absl::StrCat("the header is not JSON: ", e.what()));
  }
  if (!duplicate.empty()) {
    return Corrupt(source, absl::StrCat("the header names '", duplicate, "' twice"));
  }
  SafetensorsHeader out;
  out.data_start = 8 + length;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (value.is_null()) continue;
      if (!value.is_object()) return Corrupt(source, "__metadata__ is not a JSON object");
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string()) {
          return Corrupt(source, absl::StrCat("__metadata__[\"", key, "\"] is ", item.type_name(),
                                              ", not a string"));
        }
        out.metadata[key] = item.get<std::string>();
      }
      continue;
    }
    absl::StatusOr<TensorEntry> entry = ParseEntry(name, value, source);
    if (!entry.ok()) return entry.status();
    out.tensors.push_back(*std::move(entry));
  }
  absl::Status layout = CheckLayout(out.tensors, out.data_start, file_size, source);
  if (!layout.ok()) return layout;
  return out;
}

absl::StatusOr<std::string> SerializeSafetensorsHeader(
    const std::vector<TensorOut>& tensors, const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the insertion order: __metadata__, then the tensors in data order, each
  // entry's keys in the Rust crate's order (dtype, shape, data_offsets).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;
  for (const TensorOut& t : tensors) {
    if (t.name == kMetadataKey || header.contains(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write tensor '", t.name,
                       "': tensor names must be unique and not \"__metadata__\""));
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cannot write tensor '", t.name, "': bad shape [", absl::StrJoin(t.shape, ", "), "]"));
      }
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, TensorDtypeSize(t.dtype), &nbytes) || nbytes != t.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot write tensor '", t.name, "': ", TensorDtypeName(t.dtype), " [",
          absl::StrJoin(t.shape, ", "), "] needs ", nbytes, " bytes but ", t.bytes, " were given"));
    }
    header[t.name] = {{"dtype", std::string(TensorDtypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write the safetensors header: a name or metadata string is not UTF-8 (", e.what(),
        ")"));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &length, 8);
  return out + text;
}

}  // namespace ringtrain
