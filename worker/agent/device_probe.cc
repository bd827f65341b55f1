#include "worker/agent/device_probe.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace {

// The few NVML declarations used here, as nvml.h has them (the ABI is stable across drivers; the
// _v2 entry points exist since driver 325). NVML_SUCCESS is 0.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;  // bytes
  unsigned long long free;
  unsigned long long used;
};
constexpr unsigned kNvmlDeviceNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

// Inside Nvml's members: returns the failure of an NVML call, naming the call and NVML's reason.
#define RT_NVML_CHECK(call, what)                             \
  do {                                                        \
    const nvmlReturn_t rt_nvml_code = (call);                 \
    if (rt_nvml_code != 0) return Failed(rt_nvml_code, what); \
  } while (0)

// NVML, loaded for one probe: nvmlInit_v2 on Open, nvmlShutdown and dlclose when destroyed.
class Nvml {
 public:
  ~Nvml() {
    if (initialised_) shutdown_();
    if (handle_ != nullptr) dlclose(handle_);
  }

  // The reason (no device prefix) when the library or one of its functions is missing, or init
  // fails (e.g. a driver/library version mismatch).
  absl::Status Open(const char* library) {
    handle_ = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* why = dlerror();
      return absl::FailedPreconditionError(
          absl::StrCat("no NVIDIA driver (", why != nullptr ? why : library, ")"));
    }
    bool ok = Load(&init_, "nvmlInit_v2") && Load(&shutdown_, "nvmlShutdown") &&
              Load(&error_string_, "nvmlErrorString") && Load(&count_, "nvmlDeviceGetCount_v2") &&
              Load(&by_index_, "nvmlDeviceGetHandleByIndex_v2") &&
              Load(&by_uuid_, "nvmlDeviceGetHandleByUUID") && Load(&name_, "nvmlDeviceGetName") &&
              Load(&memory_, "nvmlDeviceGetMemoryInfo");
    if (!ok) {
      return absl::FailedPreconditionError(
          absl::StrCat(library, " lacks ", missing_, " (a driver too old for NVML v2?)"));
    }
    RT_NVML_CHECK(init_(), "nvmlInit_v2");
    initialised_ = true;
    return absl::OkStatus();
  }

  absl::StatusOr<unsigned> Count() {
    unsigned count = 0;
    RT_NVML_CHECK(count_(&count), "nvmlDeviceGetCount_v2");
    return count;
  }

  absl::StatusOr<DeviceInfo> Describe(const NvmlTarget& target) {
    nvmlDevice_t device = nullptr;
    if (target.nvml_index.has_value()) {
      RT_NVML_CHECK(by_index_(*target.nvml_index, &device), "nvmlDeviceGetHandleByIndex_v2");
    } else {
      RT_NVML_CHECK(by_uuid_(target.uuid.c_str(), &device),
                    absl::StrCat("nvmlDeviceGetHandleByUUID(", target.uuid, ")"));
    }
    char name[kNvmlDeviceNameBufferSize] = {};
    RT_NVML_CHECK(name_(device, name, sizeof(name)), "nvmlDeviceGetName");
    nvmlMemory_t memory{};
    RT_NVML_CHECK(memory_(device, &memory), "nvmlDeviceGetMemoryInfo");
    return DeviceInfo{name, memory.total};
  }

 private:
  template <typename F>
  bool Load(F** f, const char* symbol) {
    *f = reinterpret_cast<F*>(dlsym(handle_, symbol));
    if (*f == nullptr) missing_ = symbol;
    return *f != nullptr;
  }
  absl::Status Failed(nvmlReturn_t code, absl::string_view call) {
    return absl::FailedPreconditionError(
        absl::StrCat(call, " failed: ", error_string_(code), " (NVML error ", code, ")"));
  }

  void* handle_ = nullptr;
  bool initialised_ = false;
  std::string missing_;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*count_)(unsigned*) = nullptr;
  nvmlReturn_t (*by_index_)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_uuid_)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name_)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*memory_)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
};

// " (valid: cuda:0 .. cuda:<n-1>)"; "" for none.
std::string ValidCudaDevices(size_t n) {
  if (n == 0) return "";
  return absl::StrCat(" (valid: cuda:0", n == 1 ? "" : absl::StrCat(" .. cuda:", n - 1), ")");
}

absl::StatusOr<DeviceInfo> ProbeCuda(int index, const char* library) {
  Nvml nvml;
  RT_RETURN_IF_ERROR(nvml.Open(library));
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  RT_ASSIGN_OR_RETURN(const NvmlTarget target,
                      NvmlTargetFor(index, visible != nullptr ? std::optional<std::string>(visible)
                                                              : std::nullopt));
  if (target.nvml_index.has_value()) {
    RT_ASSIGN_OR_RETURN(const unsigned count, nvml.Count());
    if (*target.nvml_index >= count) return absl::FailedPreconditionError(GpuCountText(count));
  }
  return nvml.Describe(target);
}

absl::StatusOr<std::string> ReadFile(const char* path) {
  std::ifstream in(path);
  if (!in) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<DeviceInfo> ProbeCpu() {
  RT_ASSIGN_OR_RETURN(const std::string cpuinfo, ReadFile("/proc/cpuinfo"));
  RT_ASSIGN_OR_RETURN(const std::string meminfo, ReadFile("/proc/meminfo"));
  RT_ASSIGN_OR_RETURN(std::string name, CpuModelName(cpuinfo));
  RT_ASSIGN_OR_RETURN(const uint64_t memory, MemTotalBytes(meminfo));
  return DeviceInfo{std::move(name), memory};
}

}  // namespace

absl::StatusOr<std::string> CpuModelName(absl::string_view cpuinfo) {
  for (absl::string_view line : absl::StrSplit(cpuinfo, '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    if (absl::StripAsciiWhitespace(line.substr(0, colon)) != "model name") continue;
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (!value.empty()) return std::string(value);
  }
  return absl::NotFoundError("/proc/cpuinfo has no \"model name\" line");
}

absl::StatusOr<uint64_t> MemTotalBytes(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemTotal:")) continue;
    absl::string_view value = absl::StripAsciiWhitespace(line);
    uint64_t kib = 0;
    if (!absl::ConsumeSuffix(&value, "kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &kib) || kib > (UINT64_MAX >> 10)) {
      return absl::InvalidArgumentError(
          absl::StrCat("/proc/meminfo line \"MemTotal:", line, "\" is not a number of kB"));
    }
    return kib << 10;
  }
  return absl::NotFoundError("/proc/meminfo has no MemTotal line");
}

std::string GpuCountText(unsigned count) {
  if (count == 0) return "this machine has no NVIDIA GPU";
  return absl::StrCat("this machine has ", count, " NVIDIA GPU", count == 1 ? "" : "s",
                      ValidCudaDevices(count));
}

absl::StatusOr<NvmlTarget> NvmlTargetFor(int index,
                                         const std::optional<std::string>& cuda_visible_devices) {
  if (!cuda_visible_devices.has_value()) return NvmlTarget{static_cast<unsigned>(index), ""};
  std::vector<std::string> entries;
  for (absl::string_view entry : absl::StrSplit(*cuda_visible_devices, ',', absl::SkipEmpty())) {
    entries.emplace_back(absl::StripAsciiWhitespace(entry));
  }
  if (static_cast<size_t>(index) >= entries.size()) {
    const size_t n = entries.size();
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA_VISIBLE_DEVICES='", *cuda_visible_devices, "' makes ", n, " NVIDIA GPU",
                     n == 1 ? "" : "s", " visible", ValidCudaDevices(n)));
  }
  const std::string& entry = entries[index];
  unsigned driver_index = 0;
  if (absl::SimpleAtoi(entry, &driver_index)) return NvmlTarget{driver_index, ""};
  return NvmlTarget{std::nullopt, entry};  // "GPU-…" (or "MIG-…"): NVML looks UUIDs up itself
}

absl::StatusOr<DeviceInfo> ProbeDevice(const DeviceSpec& device, const char* nvml_library) {
  absl::StatusOr<DeviceInfo> info = device.type == DeviceType::kCpu
                                        ? ProbeCpu()
                                        : ProbeCuda(std::max(device.index, 0), nvml_library);
  if (info.ok()) return info;
  return absl::Status(info.status().code(),
                      absl::StrCat("device '", device.ToString(), "': ", info.status().message()));
}

DeviceInfo RegisteredDeviceInfo(const DeviceSpec& device,
                                const absl::StatusOr<DeviceInfo>& probed) {
  DeviceInfo out;
  if (probed.ok()) {
    out = *probed;
  } else {
    absl::string_view why = probed.status().message();
    absl::ConsumePrefix(&why, absl::StrCat("device '", device.ToString(), "': "));
    out.name = absl::StrCat("unknown (", why, ")");
  }
  for (char& c : out.name) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  if (out.name.size() > kMaxDeviceNameLength) {
    out.name.resize(kMaxDeviceNameLength - 3);
    out.name += "...";
  }
  return out;
}

}  // namespace ringtrain
