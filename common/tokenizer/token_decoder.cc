#include "common/tokenizer/token_decoder.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {

TokenDecoder::TokenDecoder(const std::vector<std::pair<int32_t, std::string>>& tokens) {
  bytes_.reserve(tokens.size());
  for (const auto& [id, bytes] : tokens) {
    end_ = std::max(end_, int64_t{id} + 1);
    bytes_[id] = bytes;
  }
}

absl::StatusOr<std::string> TokenDecoder::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= end_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ids[", i, "] = ", id, " is not a token id: this tokenizer's ids are 0..", end_ - 1));
    }
    const auto it = bytes_.find(id);
    if (it == bytes_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ids[", i, "] = ", id,
          " is not a token id: neither the vocabulary nor the added tokens have it (the "
          "tokenizer's ids are 0..",
          end_ - 1, " with gaps)"));
    }
    out += it->second;
  }
  return out;
}

}  // namespace ringtrain
