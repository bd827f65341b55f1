// Internal to ringtrain_job_store: a JobRecord as a row of the jobs table (its lists, error and
// restart fields as JSON columns), and what the store's operations on jobs and on step events
// share.
#ifndef RINGTRAIN_COORDINATOR_JOB_STORE_ROWS_H_
#define RINGTRAIN_COORDINATOR_JOB_STORE_ROWS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/job.h"

namespace ringtrain {

class Statement;

// The jobs table's columns that ReadJob reads, in its order (job_number is not among them).
inline constexpr const char* kJobColumns =
    "job_id, name, state, config_toml, overrides_json, world_size, dp, cp, mesh_json, wait_reason, "
    "error_json, submitted_unix_ms, started_unix_ms, finished_unix_ms, total_steps, last_step, "
    "last_loss, device_kind, restart_json, load_json";

// A state name read from the store; INTERNAL when it names no state.
absl::StatusOr<JobState> ParseJobState(const std::string& name);

// The JSON columns of a job's row.
std::string OverridesJson(const std::vector<std::string>& overrides);
std::string MeshJson(const std::vector<RankPlacement>& mesh);
// NULL (nullopt) when the job has not failed.
std::optional<std::string> ErrorJson(const std::optional<JobError>& error);
// The restart policy, the restarts so far with every failure, and an elastic restart's overrides.
std::string RestartJson(const JobRecord& job);

// The checkpoint a job starts from ("{}" when none).
std::string LoadJson(const std::optional<CheckpointLoad>& load);

// Reads the current row of `s`, selected with kJobColumns; INTERNAL when a column is not what the
// store writes.
absl::StatusOr<JobRecord> ReadJob(const Statement& s);
// Every remaining row of `s` (selecting kJobColumns), in order.
absl::StatusOr<std::vector<JobRecord>> ReadJobs(Statement& s);

// NOT_FOUND for a job id the store does not hold. The id is a client's (GetJob, CancelJob, a page
// token): escaped and cut, as every echoed value is.
absl::Status JobNotFound(const std::string& job_id);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_JOB_STORE_ROWS_H_
