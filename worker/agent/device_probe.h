// What device this agent's trainers get, as the agent reports it at Register: a name and the total
// memory. cuda:N asks the NVIDIA driver through NVML, loaded at run time with dlopen (no CUDA
// toolkit, no LibTorch: the agent builds and runs on machines without either); cpu reads
// /proc/cpuinfo and /proc/meminfo. The parsers take the files' text, so tests feed them fixtures.
#ifndef RINGTRAIN_WORKER_AGENT_DEVICE_PROBE_H_
#define RINGTRAIN_WORKER_AGENT_DEVICE_PROBE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/device.h"

namespace ringtrain {

// The driver library NVML lives in (the versioned name: the bare .so comes only with dev packages).
inline constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";
// The longest name the agent registers; the coordinator takes no longer (worker_admission.h).
inline constexpr size_t kMaxDeviceNameLength = 128;

struct DeviceInfo {
  std::string name;           // "NVIDIA H200", "AMD EPYC 7B13 64-Core Processor"
  uint64_t memory_bytes = 0;  // total device memory (for the CPU: the machine's MemTotal)
};

// The value of the first "model name" line of /proc/cpuinfo text, trimmed. NOT_FOUND when none has
// one (some ARM kernels write no model name).
absl::StatusOr<std::string> CpuModelName(absl::string_view cpuinfo);
// MemTotal of /proc/meminfo text, in bytes (the file's "kB" are KiB). NOT_FOUND without the line,
// INVALID_ARGUMENT naming the line when it does not hold a number of kB.
absl::StatusOr<uint64_t> MemTotalBytes(absl::string_view meminfo);

// Which GPU the driver calls cuda:`index`, given $CUDA_VISIBLE_DEVICES (nullopt: unset). Unset:
// NVML's own index `index`. Set: its `index`-th entry (a driver index "2" or a UUID "GPU-…"); an
// empty variable hides every GPU. FAILED_PRECONDITION naming the variable and the valid devices
// when the entry does not exist.
struct NvmlTarget {
  std::optional<unsigned> nvml_index;  // set: the driver's index
  std::string uuid;                    // else: the GPU's UUID
};
absl::StatusOr<NvmlTarget> NvmlTargetFor(int index,
                                         const std::optional<std::string>& cuda_visible_devices);

// "this machine has 1 NVIDIA GPU (valid: cuda:0)"; "… has no NVIDIA GPU" for 0.
std::string GpuCountText(unsigned count);

// The name and memory of `device`. Errors name the device and why, e.g. "device 'cuda:3': this
// machine has 1 NVIDIA GPU (valid: cuda:0)" or "device 'cuda:0': no NVIDIA driver
// (libnvidia-ml.so.1: cannot open shared object file: …)". `nvml_library` is the file dlopen
// loads (tests pass a name that does not exist).
absl::StatusOr<DeviceInfo> ProbeDevice(const DeviceSpec& device,
                                       const char* nvml_library = kNvmlLibrary);

// What the agent registers: `probed` when it holds a value, else name "unknown (<why>)" (the
// error without its "device 'X': " prefix) and memory 0. Either way the name is printable ASCII
// (anything else becomes '?') of at most kMaxDeviceNameLength bytes, as the coordinator requires.
DeviceInfo RegisteredDeviceInfo(const DeviceSpec& device, const absl::StatusOr<DeviceInfo>& probed);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_DEVICE_PROBE_H_
