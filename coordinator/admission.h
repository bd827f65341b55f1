// What the coordinator checks of a SubmitJobRequest before it touches the cluster: the bounds on
// its sizes (config_limits.h), the job name, the device kind, the config (parsed with its overrides
// and validated), the mesh it asks for, and the JobRecord a queued job starts as. Pure: no lock, no
// store, no pool (whether the pool can ever run the job is the scheduler's CheckCanEverRun).
#ifndef RINGTRAIN_COORDINATOR_ADMISSION_H_
#define RINGTRAIN_COORDINATOR_ADMISSION_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/job_config.h"
#include "coordinator/job.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

// The largest message the coordinator's server receives (gRPC's default, set explicitly). Every
// admissible SubmitJobRequest is far smaller (config_limits.h: <= 256 KiB + 256 × 4 KiB + a name).
inline constexpr int kMaxReceiveMessageBytes = 4 * 1024 * 1024;

// Job names: at most this many bytes of UTF-8, no control characters (CheckJobName).
inline constexpr size_t kMaxJobNameBytes = 128;

// OK for the kinds of worker there are ("cpu", "cuda"); INVALID_ARGUMENT naming them otherwise.
absl::Status CheckDeviceKind(const std::string& kind);

// OK for a name of at most kMaxJobNameBytes bytes of valid UTF-8 with no C0 or C1 control character
// (U+0000-U+001F, U+007F-U+009F) and no bidirectional control (U+202A-U+202E, U+2066-U+2069), so
// that it prints as itself on a terminal; "" is fine (the coordinator picks one). INVALID_ARGUMENT
// naming the offending byte offset and code point otherwise.
absl::Status CheckJobName(absl::string_view name);

// What a valid config asks for that the service changes or ignores, one line each, naming the key
// and where the data goes instead or what was used: metrics.jsonl (the service keeps the step
// records; `ringctl export`), and learning-rate phases longer than the run (clamped,
// common/config/lr_phases.h).
std::vector<std::string> AdmissionWarnings(const JobConfig& config);

// The record a valid request becomes (no job id, no name when the request has none, state
// QUEUED, AdmissionWarnings in `warnings`). INVALID_ARGUMENT naming what is wrong otherwise; a
// request beyond a bound names the limit and the actual size. Never throws, whatever the bytes.
absl::StatusOr<JobRecord> AdmitSubmitRequest(const v1::SubmitJobRequest& request);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_ADMISSION_H_
