#include "coordinator/job_checkpoints.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace {

// The config a stored job runs with: its text, its overrides, an elastic restart's mesh.
absl::StatusOr<JobConfig> StoredConfig(const JobRecord& job) {
  std::vector<std::string> overrides = job.overrides;
  overrides.insert(overrides.end(), job.mesh_overrides.begin(), job.mesh_overrides.end());
  absl::StatusOr<JobConfig> config = ParseJobConfig(job.config_toml, overrides, job.job_id);
  if (!config.ok()) {
    return absl::InternalError(absl::StrCat("the stored config of ", job.job_id,
                                            " no longer parses: ", config.status().message()));
  }
  return config;
}

}  // namespace

absl::StatusOr<std::vector<ListedCheckpoint>> JobCheckpoints(JobStore& store,
                                                             const JobRecord& job) {
  RT_ASSIGN_OR_RETURN(const std::vector<SavedCheckpoint> saved, store.Checkpoints(job.job_id));
  if (saved.empty()) return std::vector<ListedCheckpoint>{};
  RT_ASSIGN_OR_RETURN(const JobConfig config, StoredConfig(job));
  return ListCheckpoints(saved, job.job_id, config.checkpoint.folder,
                         config.checkpoint.keep_latest_k);
}

absl::StatusOr<std::optional<CheckpointLoad>> ResolveLoadRequest(
    JobStore& store, const v1::SubmitJobRequest& request) {
  const bool init = !request.init_from().empty();
  const bool resume = !request.resume_from().empty();
  if (!init && !resume) return std::nullopt;
  if (init && resume) {
    return absl::InvalidArgumentError(
        "--init-from and --resume-from both given: a job starts from one checkpoint; give "
        "--init-from for the weights alone, --resume-from to continue the training");
  }
  const LoadKind kind = init ? LoadKind::kInit : LoadKind::kResume;
  RT_ASSIGN_OR_RETURN(const CheckpointRef ref,
                      ParseCheckpointRef(init ? request.init_from() : request.resume_from(), kind));
  const std::vector<std::string> overrides(request.overrides().begin(), request.overrides().end());
  // Admission parsed and checked it already (admission.h); only the keys are read here.
  RT_ASSIGN_OR_RETURN(const JobConfig target,
                      ParseJobConfig(request.config_toml(), overrides, "job config"));
  if (!target.checkpoint.initial_load_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        LoadFlag(kind), " ", ref.job_id, " and checkpoint.initial_load_path = \"",
        target.checkpoint.initial_load_path, "\" both name initial weights; drop one of them"));
  }
  absl::StatusOr<JobRecord> source = store.GetJob(ref.job_id);
  if (absl::IsNotFound(source.status())) {
    return absl::InvalidArgumentError(absl::StrCat(LoadFlag(kind), " ", ref.job_id,
                                                   ": this coordinator has no job ", ref.job_id,
                                                   " (ringctl list shows the jobs)"));
  }
  RT_RETURN_IF_ERROR(source.status());
  RT_ASSIGN_OR_RETURN(const JobConfig source_config, StoredConfig(*source));
  RT_ASSIGN_OR_RETURN(const std::vector<ListedCheckpoint> listed, JobCheckpoints(store, *source));
  RT_ASSIGN_OR_RETURN(const ListedCheckpoint chosen,
                      ChooseCheckpoint(ref, kind, listed, source_config));
  RT_RETURN_IF_ERROR(CheckLoadCompatible(source_config, ref.job_id, chosen.step, target, kind));
  return CheckpointLoad{ref.job_id, source_config.checkpoint.folder, chosen.step,
                        kind == LoadKind::kInit};
}

}  // namespace ringtrain
