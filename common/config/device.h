// Where a rank computes, parsed once from its --device flag ("cpu", "cuda", "cuda:N") so that the
// trainer and the engine switch on a type instead of comparing strings. Torch-free.
#ifndef RINGTRAIN_COMMON_CONFIG_DEVICE_H_
#define RINGTRAIN_COMMON_CONFIG_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

enum class DeviceType { kCpu, kCuda };

struct DeviceSpec {
  DeviceType type = DeviceType::kCpu;
  int index = -1;  // cuda:N; -1 = the current CUDA device ("cuda"), always -1 for the CPU

  std::string ToString() const;  // "cpu", "cuda", "cuda:1": the flag that parses back to it
  bool operator==(const DeviceSpec& other) const {
    return type == other.type && index == other.index;
  }
};

// INVALID_ARGUMENT "device 'x' is not a device (valid: cpu, cuda:N)" for anything else.
absl::StatusOr<DeviceSpec> ParseDevice(absl::string_view text);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_DEVICE_H_
