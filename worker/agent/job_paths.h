// Where a job's files may be on this worker: every path a job names (common/config/config_paths.h)
// is resolved under one of the agent's roots before the trainer starts, and the trainer is given
// the resolved absolute paths as overrides. A path is refused — the rank fails at once, nothing
// read or created — when it leaves its root: an absolute path outside it, a ".." that climbs out,
// or a symlink (anywhere along the path) whose target is outside it. Torch- and gRPC-free.
//
//   data:       datasets and initial weights, read-only, under --data-root (none: such jobs
//   refused) checkpoint: checkpoint.folder, under the job's own folder <checkpoint-root>/<job_id>/,
//   so two
//               jobs with the same checkpoint.folder never share files
//
// The check is made once, by the agent; a symlink swapped into a root between the check and the
// trainer's open is not caught, so a data root must not be writable by those who submit jobs.
#ifndef RINGTRAIN_WORKER_AGENT_JOB_PATHS_H_
#define RINGTRAIN_WORKER_AGENT_JOB_PATHS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/job_config.h"

namespace ringtrain {

// Whether `job_id` can name a folder directly under a work dir or a checkpoint root: not empty, not
// "." or "..", and only letters, digits, '-', '_' and '.' (no separators). Every path the agent
// builds from a job id (an assignment's rank folder, a LogRequest's or StepRecordsRequest's file)
// is checked with it first. INVALID_ARGUMENT naming the id and the characters allowed otherwise.
absl::Status CheckJobId(absl::string_view job_id);

struct JobRoots {
  std::string data_root;        // absolute and canonical, or empty: no job may read a file
  std::string checkpoint_root;  // absolute and canonical; each job gets <checkpoint_root>/<job_id>/
};

// The flag's folder made absolute and canonical (symlinks resolved). `create` makes it first
// (--checkpoint-root); otherwise it must exist and be a folder (--data-root). FAILED_PRECONDITION
// naming the flag and the folder otherwise.
absl::StatusOr<std::string> CanonicalRoot(absl::string_view flag, const std::string& dir,
                                          bool create);

// `value` of `key` resolved under `root` (absolute, canonical): relative values below it, absolute
// ones only if they lie inside it; the existing part of the path is resolved through its symlinks
// (the rest, not there yet, taken as written) and must still be inside `root`. Returns the resolved
// absolute path. INVALID_ARGUMENT naming the key, the value and `root_name` ("--data-root
// /srv/data") otherwise; FAILED_PRECONDITION when `root` is empty (naming `root_name`'s flag to
// start with).
absl::StatusOr<std::string> ResolveUnderRoot(absl::string_view key, const std::string& value,
                                             const std::string& root, absl::string_view root_name);

// Every path of `config` resolved (ConfigPaths), as "--key=/resolved/path" overrides to append to
// the job's own. For checkpoint.folder it first creates <checkpoint_root>/<job_id>/ (job_id must
// already have passed CheckJobId). Errors as ResolveUnderRoot's, one for the first refused path;
// INTERNAL when the job's checkpoint folder cannot be created. Never reads a file of the job.
absl::StatusOr<std::vector<std::string>> ResolveJobPaths(const JobConfig& config,
                                                         const JobRoots& roots,
                                                         const std::string& job_id);

// Another job's checkpoint step (an Assignment's CheckpointLoad: --init-from / --resume-from),
// read from <checkpoint_root>/<source_job>/<folder>/step-<step>: `folder` (the source job's
// checkpoint.folder) confined to that job's folder as ResolveUnderRoot confines, the step folder
// complete (its COMPLETE marker there). Returns the trainer's overrides:
// checkpoint.initial_load_path (the step folder), initial_load_in_hf = false and
// initial_load_model_only. INVALID_ARGUMENT for a job id or folder that leaves the root;
// FAILED_PRECONDITION naming the folder when it is not there or not complete (most often: this
// worker does not share the --checkpoint-root of the worker that saved it).
absl::StatusOr<std::vector<std::string>> ResolveCheckpointLoad(const std::string& source_job,
                                                               const std::string& folder,
                                                               int64_t step, bool model_only,
                                                               const std::string& checkpoint_root);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_JOB_PATHS_H_
