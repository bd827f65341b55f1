#include "coordinator/admission.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/config_paths.h"
#include "common/config/job_config.h"
#include "common/status_macros.h"

namespace ringtrain {
absl::Status CheckDeviceKind(const std::string& kind) {
  if (kind == "cpu" || kind == "cuda") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("device_kind \"", kind, "\" is not a kind of worker; use cpu or cuda"));
}

absl::StatusOr<JobRecord> AdmitSubmitRequest(const v1::SubmitJobRequest& request) {
  const std::string device_kind = request.device_kind().empty() ? "cpu" : request.device_kind();
  RT_RETURN_IF_ERROR(CheckDeviceKind(device_kind));
  std::vector<std::string> overrides(request.overrides().begin(), request.overrides().end());
  absl::StatusOr<JobConfig> config = ParseJobConfig(request.config_toml(), overrides, "job config");
  if (!config.ok()) return config.status();
  RT_RETURN_IF_ERROR(CheckConfigPaths(*config));
  const int64_t dp = std::max<int64_t>(config->parallelism.data_parallel_replicate_degree, 1);
  const int64_t cp = config->parallelism.context_parallel_degree;
  RT_RETURN_IF_ERROR(ValidateMesh(*config, dp * cp));

  JobRecord job;
  job.name = request.name();
  job.config_toml = request.config_toml();
  job.overrides = std::move(overrides);
  job.world_size = static_cast<int>(dp * cp);
  job.dp = static_cast<int>(dp);
  job.cp = static_cast<int>(cp);
  job.device_kind = device_kind;
  job.total_steps = config->job.mode == JobMode::kEval ? 0 : config->training.steps;
  return job;
}

}  // namespace ringtrain
