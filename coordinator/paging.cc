#include "coordinator/paging.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {

absl::StatusOr<int> PageSize(int32_t requested) {
  if (requested < 0) {
    return absl::InvalidArgumentError(absl::StrCat("page_size = ", requested,
                                                   ": must be >= 0 (0 means ", kDefaultPageSize,
                                                   ", at most ", kMaxPageSize, ")"));
  }
  if (requested == 0) return kDefaultPageSize;
  return requested > kMaxPageSize ? kMaxPageSize : static_cast<int>(requested);
}

std::string NextPageToken(absl::string_view kind, absl::string_view last_id) {
  return absl::StrCat(kind, "-after:", last_id);
}

absl::StatusOr<std::string> PageTokenId(absl::string_view kind, absl::string_view token) {
  if (token.empty()) return std::string();
  const std::string prefix = absl::StrCat(kind, "-after:");
  if (!absl::StartsWith(token, prefix) || token.size() == prefix.size() || token.size() > 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_token is not a token of this list; pass \"\" for the first page, then the "
        "previous response's next_page_token"));
  }
  return std::string(token.substr(prefix.size()));
}

}  // namespace ringtrain
