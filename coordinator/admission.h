// What the coordinator checks of a SubmitJobRequest before it touches the cluster: the device kind,
// the config (parsed with its overrides and validated), the mesh it asks for, and the JobRecord a
// queued job starts as. Pure: no lock, no store, no pool (whether the pool can ever run the job is
// the scheduler's CheckCanEverRun).
#ifndef RINGTRAIN_COORDINATOR_ADMISSION_H_
#define RINGTRAIN_COORDINATOR_ADMISSION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/job.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

// OK for the kinds of worker there are ("cpu", "cuda"); INVALID_ARGUMENT naming them otherwise.
absl::Status CheckDeviceKind(const std::string& kind);

// The record a valid request becomes (no job id, no name when the request has none, state
// QUEUED). INVALID_ARGUMENT naming what is wrong otherwise. Never throws, whatever the bytes.
absl::StatusOr<JobRecord> AdmitSubmitRequest(const v1::SubmitJobRequest& request);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_ADMISSION_H_
