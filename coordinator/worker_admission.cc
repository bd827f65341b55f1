#include "coordinator/worker_admission.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/config/device.h"
#include "common/status_macros.h"
#include "common/worker_id.h"
#include "coordinator/admission.h"

namespace ringtrain {
namespace {

enum class Required { kYes, kNo };

// `value` of field `name`: present if required, at most `max` bytes, printable ASCII; `spaces`
// says whether ' ' is allowed (a label may hold one, an address or id may not).
absl::Status CheckField(const char* name, const std::string& value, Required required, size_t max,
                        bool spaces, const char* example) {
  if (value.empty()) {
    if (required == Required::kNo) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(name, " is empty; expected e.g. ", example));
  }
  if (value.size() > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is ", value.size(), " bytes long; at most ", max, " are allowed"));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c > 0x20 && c < 0x7f) continue;
    if (c == ' ' && spaces) continue;
    // The value itself is not echoed: it may hold terminal control sequences.
    return absl::InvalidArgumentError(
        absl::StrCat(name, " holds byte 0x", absl::Hex(c, absl::kZeroPad2), " at offset ", i,
                     "; only printable ASCII", spaces ? "" : " without spaces",
                     " is allowed (e.g. ", example, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRegisterRequest(const v1::RegisterRequest& r) {
  RT_RETURN_IF_ERROR(CheckField("device_kind", r.device_kind(), Required::kYes,
                                kMaxWorkerFieldLength, false, "cpu or cuda"));
  RT_RETURN_IF_ERROR(CheckDeviceKind(r.device_kind()));
  RT_RETURN_IF_ERROR(
      CheckField("device", r.device(), Required::kYes, kMaxWorkerFieldLength, false, "cuda:0"));
  const absl::StatusOr<DeviceSpec> device = ParseDevice(r.device());
  const bool cuda = r.device_kind() == "cuda";
  if (!device.ok() || (device->type == DeviceType::kCuda) != cuda || (cuda && device->index < 0)) {
    return absl::InvalidArgumentError(absl::StrCat("device \"", r.device(), "\" is not a ",
                                                   r.device_kind(), " device; expected ",
                                                   cuda ? "cuda:N (e.g. cuda:0)" : "cpu"));
  }
  RT_RETURN_IF_ERROR(CheckField("address", r.address(), Required::kYes, kMaxWorkerHostLength, false,
                                "10.0.0.7 or node-3.cluster.local (--advertise-address)"));
  RT_RETURN_IF_ERROR(CheckField("host_label", r.host_label(), Required::kNo, kMaxWorkerHostLength,
                                true, "node-3 (--host-label)"));
  RT_RETURN_IF_ERROR(CheckField("device_name", r.device_name(), Required::kNo,
                                kMaxWorkerFieldLength, true, "NVIDIA H200"));
  RT_RETURN_IF_ERROR(CheckField("previous_worker_id", r.previous_worker_id(), Required::kNo,
                                kMaxWorkerFieldLength, false, "worker-3"));
  if (!r.requested_worker_id().empty()) {
    RT_RETURN_IF_ERROR(CheckWorkerId("requested_worker_id", r.requested_worker_id()));
  }
  RT_RETURN_IF_ERROR(CheckField("previous_credential", r.previous_credential(), Required::kNo,
                                kMaxWorkerFieldLength, false, "the credential Register gave"));
  RT_RETURN_IF_ERROR(CheckField("running_job_id", r.running_job_id(), Required::kNo,
                                kMaxWorkerFieldLength, false, "job-000001"));
  if (!r.running_job_id().empty() && r.running_rank() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("running_rank ", r.running_rank(),
                                                   " is not a rank; expected 0 .. world_size-1"));
  }
  return absl::OkStatus();
}

std::string ShownCheckpointRoot(const std::string& root) {
  return CheckField("checkpoint_root", root, Required::kNo, kMaxCheckpointRootLength, true, "/ckpt")
                 .ok()
             ? root
             : "";
}

}  // namespace ringtrain
