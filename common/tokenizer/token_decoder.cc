#include "common/tokenizer/token_decoder.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {

TokenDecoder::TokenDecoder(const std::vector<std::pair<int32_t, std::string>>& tokens) {
  size_t size = 0;
  for (const auto& [id, bytes] : tokens) size = std::max(size, static_cast<size_t>(id) + 1);
  bytes_.resize(size);
  for (const auto& [id, bytes] : tokens) bytes_[id] = bytes;
}

absl::StatusOr<std::string> TokenDecoder::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= bytes_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ids[", i, "] = ", id, " is not a token id: this tokenizer's ids are 0..",
                       static_cast<int64_t>(bytes_.size()) - 1));
    }
    if (!bytes_[id].has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ids[", i, "] = ", id,
          " is not a token id: neither the vocabulary nor the added tokens have it (the "
          "tokenizer's ids are 0..",
          static_cast<int64_t>(bytes_.size()) - 1, " with gaps)"));
    }
    out += *bytes_[id];
  }
  return out;
}

}  // namespace ringtrain
