// Paging of ListJobs and ListWorkers (AIP-158): page sizes, page tokens, and the byte budget that
// keeps every page far below gRPC's 4 MiB message limit however large the items are.
#ifndef RINGTRAIN_COORDINATOR_PAGING_H_
#define RINGTRAIN_COORDINATOR_PAGING_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

inline constexpr int kDefaultPageSize = 100;
inline constexpr int kMaxPageSize = 1000;
// A page stops before the item that would take it past this many bytes (it holds at least one;
// one job is at most ~1.3 MiB of config and overrides plus its mesh, see config_limits.h).
inline constexpr size_t kMaxPageBytes = 1024 * 1024;

// The page size to use for a request's page_size: 0 → kDefaultPageSize, above kMaxPageSize →
// kMaxPageSize; INVALID_ARGUMENT for a negative one.
absl::StatusOr<int> PageSize(int32_t requested);

// The token of the page after the one ending with `last_id`; `kind` ("jobs", "workers") keeps a
// token of one list from being taken by the other.
std::string NextPageToken(absl::string_view kind, absl::string_view last_id);
// The last id of the previous page ("" for the first page, token ""); INVALID_ARGUMENT for a token
// that NextPageToken(kind, ...) did not make.
absl::StatusOr<std::string> PageTokenId(absl::string_view kind, absl::string_view token);

// How many of `items` (protobuf messages, in page order) one page takes: at most `page_size`, and
// no more than fit in kMaxPageBytes, but always at least one when there is one.
template <class Message>
size_t PageLength(const std::vector<Message>& items, size_t page_size) {
  size_t n = 0;
  size_t bytes = 0;
  while (n < items.size() && n < page_size) {
    const size_t size = items[n].ByteSizeLong() + 8;  // + the field's tag and length
    if (n > 0 && bytes + size > kMaxPageBytes) break;
    bytes += size;
    ++n;
  }
  return n;
}

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_PAGING_H_
