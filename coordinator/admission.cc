#include "coordinator/admission.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/config_paths.h"
#include "common/config/job_config.h"
#include "common/config/lr_phases.h"
#include "common/config/mesh.h"
#include "common/printable.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace {

// `text` for an error message: at most 32 bytes, anything but printable ASCII as \xNN.
std::string Echo(absl::string_view text) {
  std::string out;
  for (const char c : text.substr(0, 32)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '"' && c != '\\') {
      out += c;
    } else {
      out += absl::StrFormat("\\x%02x", u);
    }
  }
  if (text.size() > 32) out += "...";
  return out;
}

}  // namespace

std::vector<std::string> AdmissionWarnings(const JobConfig& config) {
  std::vector<std::string> warnings = config.warnings;
  if (!config.metrics.jsonl.empty()) {
    warnings.push_back(absl::StrCat(
        "metrics.jsonl = \"", Echo(config.metrics.jsonl),
        "\" is ignored: on the service the worker writes each rank's step records itself and the "
        "coordinator stores rank 0's; get them as JSONL with `ringctl export JOB --out FILE` (the "
        "same records) or follow them with `ringctl watch JOB --output json`"));
  }
  LrPhases phases = ResolveLrPhases(config);
  for (std::string& warning : phases.warnings) warnings.push_back(std::move(warning));
  return warnings;
}

absl::Status CheckDeviceKind(const std::string& kind) {
  if (kind == "cpu" || kind == "cuda") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("device_kind \"", Echo(kind), "\" is not a kind of worker; use cpu or cuda"));
}

absl::Status CheckJobName(absl::string_view name) {
  if (name.size() > kMaxJobNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("name \"", Echo(name), "\" is ", name.size(),
                                                   " bytes; at most ", kMaxJobNameBytes,
                                                   " bytes are allowed"));
  }
  for (size_t i = 0; i < name.size();) {
    const auto [cp, length] = DecodeUtf8(name, i);
    if (length == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "name \"", Echo(name), "\": byte ", i, " is not valid UTF-8; job names are UTF-8 text"));
    }
    if (IsUnprintable(cp)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "name \"%s\": byte %d is the %s U+%04X; job names must be printable (UTF-8 is fine, "
          "control "
          "characters and bidirectional controls are not)",
          Echo(name), i, IsBidiControl(cp) ? "bidirectional control" : "control character", cp));
    }
    i += length;
  }
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> AdmitSubmitRequest(const v1::SubmitJobRequest& request) {
  std::vector<std::string> overrides(request.overrides().begin(), request.overrides().end());
  RT_RETURN_IF_ERROR(CheckJobName(request.name()));
  const std::string device_kind = request.device_kind().empty() ? "cpu" : request.device_kind();
  RT_RETURN_IF_ERROR(CheckDeviceKind(device_kind));
  // ParseJobConfig checks the sizes (config text, override count and length,
  // common/config/config_limits.h) before any byte is parsed: once per submit.
  absl::StatusOr<JobConfig> config = ParseJobConfig(request.config_toml(), overrides, "job config");
  if (!config.ok()) return config.status();
  RT_RETURN_IF_ERROR(CheckConfigPaths(*config));
  // A valid config's degrees multiply to at most kMaxWorldSize; a -1 degree is read as 1.
  const int64_t world = RequestedWorldSize(*config);
  RT_ASSIGN_OR_RETURN(const MeshDegrees mesh, ResolveMesh(*config, world));

  JobRecord job;
  job.name = request.name();
  job.config_toml = request.config_toml();
  job.overrides = std::move(overrides);
  job.degrees = {static_cast<int>(mesh.world), static_cast<int>(mesh.dp()),
                 static_cast<int>(mesh.cp), static_cast<int>(mesh.ulysses)};
  job.device_kind = device_kind;
  // An eval job writes one record, step 1, holding its validation loss (stored and shown as a
  // step).
  job.total_steps = config->job.mode == JobMode::kEval ? 1 : config->training.steps;
  job.restart.max_restarts = static_cast<int>(config->job.max_restarts);
  job.restart.backoff_ms = static_cast<int64_t>(config->job.restart_backoff_seconds * 1000.0);
  job.restart.elastic = config->job.elastic;
  job.warnings = AdmissionWarnings(*config);
  return job;
}

}  // namespace ringtrain
