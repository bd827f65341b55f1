// FuzzConfig: the TOML text and overrides a job is submitted with, through the parser and the
// validator the coordinator and the trainer share.
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/config/job_config.h"
#include "common/config/mesh.h"
#include "fuzz/fuzz_targets.h"

namespace ringtrain::fuzz {

std::string FuzzConfig(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const size_t toml_end = bytes.find('\0');
  const std::string toml = bytes.substr(0, toml_end);
  std::vector<std::string> overrides;
  for (size_t at = toml_end; at != std::string::npos && at < bytes.size();) {
    const size_t next = bytes.find('\0', at + 1);
    overrides.push_back(bytes.substr(at + 1, next == std::string::npos ? next : next - at - 1));
    at = next;
  }

  const absl::StatusOr<JobConfig> config = ParseJobConfig(toml, overrides, "fuzz.toml");
  if (!config.ok()) {
    if (config.status().message().empty()) return "a rejected config has an empty message";
    return "";
  }
  // What is recorded next to checkpoints must read back as the same config.
  const std::string printed = JobConfigToToml(*config);
  const absl::StatusOr<JobConfig> again = ParseJobConfig(printed, {}, "printed.toml");
  if (!again.ok()) {
    return absl::StrCat("an accepted config prints as TOML that is rejected:\n", printed, "\n",
                        again.status().ToString());
  }
  const std::string reprinted = JobConfigToToml(*again);
  if (reprinted != printed) {
    return absl::StrCat("an accepted config does not print the same twice:\n", printed, "\nthen\n",
                        reprinted);
  }
  for (const int64_t world : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{8}, int64_t{1} << 40}) {
    const absl::StatusOr<MeshDegrees> mesh = ResolveMesh(*config, world);
    if (mesh.ok() && (mesh->dp() * mesh->cp != world || mesh->world != world)) {
      return absl::StrCat("ResolveMesh accepts world size ", world, " but dp × cp differs");
    }
  }
  return "";
}

}  // namespace ringtrain::fuzz
