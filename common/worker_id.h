// A worker id an agent asks for (`ringtrain-worker --worker-id`, RegisterRequest's
// requested_worker_id): a name that is safe in logs, `ringctl workers`, store rows and folder
// names. Both the agent (at start) and the coordinator (at Register) check it with CheckWorkerId.
#ifndef RINGTRAIN_COMMON_WORKER_ID_H_
#define RINGTRAIN_COMMON_WORKER_ID_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

// A Kubernetes pod name is a DNS label of at most 63 bytes; room for a prefix beside one.
inline constexpr size_t kMaxWorkerIdBytes = 96;

// OK when `id` is 1..kMaxWorkerIdBytes bytes of letters, digits, '-', '_' and '.', starting with
// a letter or a digit (e.g. "worker-0", "ringtrain-worker-3", "gpu01.rack2"). INVALID_ARGUMENT
// naming `what` ("--worker-id", "requested_worker_id"), the rule broken and an example otherwise;
// the value is echoed only when it is printable ASCII.
absl::Status CheckWorkerId(absl::string_view what, absl::string_view id);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_WORKER_ID_H_
