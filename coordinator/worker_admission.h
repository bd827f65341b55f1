// What the coordinator checks of a RegisterRequest before it touches the worker registry: every
// field present where it must be, of bounded length, printable ASCII only (they end up in logs,
// `ringctl workers` and the rendezvous address of other ranks), and a device that parses and
// matches the kind. Pure: no lock, no store.
#ifndef RINGTRAIN_COORDINATOR_WORKER_ADMISSION_H_
#define RINGTRAIN_COORDINATOR_WORKER_ADMISSION_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "ringtrain/v1/worker_service.pb.h"

namespace ringtrain {

// Longest address and host_label (a DNS name's limit); longest ids, device, device_name and
// credential.
inline constexpr size_t kMaxWorkerHostLength = 253;
inline constexpr size_t kMaxWorkerFieldLength = 128;

// OK, or INVALID_ARGUMENT naming the field, the rule it breaks and what would work.
absl::Status CheckRegisterRequest(const v1::RegisterRequest& request);

inline constexpr size_t kMaxCheckpointRootLength = 1024;

// A registered checkpoint_root as the coordinator keeps it (display only, so never a reason to
// refuse a worker): as given when it is printable ASCII of at most kMaxCheckpointRootLength bytes,
// else "".
std::string ShownCheckpointRoot(const std::string& root);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_WORKER_ADMISSION_H_
