#include "worker/agent/agent_options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config/device.h"
#include "common/status_macros.h"
#include "common/worker_id.h"
#include "worker/agent/job_paths.h"

namespace ringtrain {
namespace {

// The trainer must be an executable file; the error says how to get one.
absl::Status CheckTrainer(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("no trainer: pass --trainer PATH");
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer '", path, "' does not exist (", std::strerror(errno),
                     "); build ringtrain-trainer beside ringtrain-worker or pass --trainer PATH"));
  }
  if (!S_ISREG(st.st_mode) || access(path.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer '", path, "' is not an executable file; pass --trainer PATH to one"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> DeviceKind(absl::string_view device) {
  // The trainer's own parser, so the agent accepts exactly what its trainers will; an agent names
  // its CUDA device (cuda:N), it never means "whichever is current".
  const absl::StatusOr<DeviceSpec> spec = ParseDevice(device);
  if (!spec.ok() || (spec->type == DeviceType::kCuda && spec->index < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device '", device, "' is not valid; expected cpu or cuda:N (e.g. cuda:0)"));
  }
  return std::string(spec->type == DeviceType::kCpu ? "cpu" : "cuda");
}

absl::StatusOr<AgentOptions> CheckAgentOptions(AgentOptions options) {
  if (options.threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads ", options.threads, " is not valid; expected a whole number >= 1"));
  }
  if (options.coordinator.empty()) {
    return absl::InvalidArgumentError("--coordinator is empty; expected HOST:PORT");
  }
  if (options.advertise_address.empty()) {
    return absl::InvalidArgumentError("--advertise-address is empty; expected a host name or IP");
  }
  if (!options.worker_id.empty())
    RT_RETURN_IF_ERROR(CheckWorkerId("--worker-id", options.worker_id));
  RT_RETURN_IF_ERROR(CheckTrainer(options.trainer_path));
  std::error_code ec;
  const std::filesystem::path work_dir = std::filesystem::absolute(options.work_dir, ec);
  if (!ec) std::filesystem::create_directories(work_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("--work-dir '", options.work_dir, "' cannot be created: ", ec.message()));
  }
  options.work_dir = work_dir.lexically_normal().string();
  if (options.work_dir.size() > 1 && options.work_dir.back() == '/') options.work_dir.pop_back();
  if (!options.data_root.empty()) {
    RT_ASSIGN_OR_RETURN(options.data_root, CanonicalRoot("--data-root", options.data_root, false));
  }
  if (options.checkpoint_root.empty()) options.checkpoint_root = options.work_dir + "/checkpoints";
  RT_ASSIGN_OR_RETURN(options.checkpoint_root,
                      CanonicalRoot("--checkpoint-root", options.checkpoint_root, true));
  return options;
}

}  // namespace ringtrain
