// Where the job store meets load_source.h's pure decisions: a job's checkpoints as GetJob shows
// them, and the checkpoint a SubmitJobRequest's init_from / resume_from names, resolved and
// checked against the stored source job. Thread-safe as the store is; no lock of its own.
#ifndef RINGTRAIN_COORDINATOR_JOB_CHECKPOINTS_H_
#define RINGTRAIN_COORDINATOR_JOB_CHECKPOINTS_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/job.h"
#include "coordinator/job_store.h"
#include "coordinator/load_source.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

// The checkpoints of `job` (ListCheckpoints over the store's notes, with the folder and
// keep_latest_k of its config). Errors of the store, or INTERNAL for a stored config that no
// longer parses.
absl::StatusOr<std::vector<ListedCheckpoint>> JobCheckpoints(JobStore& store, const JobRecord& job);

// The checkpoint `request` starts from, or nullopt when it names none: its JOB[@STEP] parsed, the
// job looked up, the step chosen (ChooseCheckpoint) and the request's config checked against the
// source's (CheckLoadCompatible). INVALID_ARGUMENT for both flags at once, for
// checkpoint.initial_load_path set as well, or for a job the store does not hold; the rest as
// load_source.h says.
absl::StatusOr<std::optional<CheckpointLoad>> ResolveLoadRequest(
    JobStore& store, const v1::SubmitJobRequest& request);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_JOB_CHECKPOINTS_H_
