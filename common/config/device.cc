#include "common/config/device.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ringtrain {

std::string DeviceSpec::ToString() const {
  if (type == DeviceType::kCpu) return "cpu";
  return index < 0 ? "cuda" : absl::StrCat("cuda:", index);
}

// LibTorch's device index is 8 bits wide.
constexpr int kMaxCudaIndex = 127;

absl::StatusOr<DeviceSpec> ParseDevice(absl::string_view text) {
  if (text == "cpu") return DeviceSpec{DeviceType::kCpu, -1};
  if (text == "cuda") return DeviceSpec{DeviceType::kCuda, -1};
  absl::string_view index_text = text;
  int index = -1;
  // Digits only: SimpleAtoi would also take "+1" and " 1".
  if (absl::ConsumePrefix(&index_text, "cuda:") && !index_text.empty() &&
      std::all_of(index_text.begin(), index_text.end(), absl::ascii_isdigit) &&
      index_text.size() <= 3 && absl::SimpleAtoi(index_text, &index) && index <= kMaxCudaIndex) {
    return DeviceSpec{DeviceType::kCuda, index};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device '", text, "' is not a device (valid: cpu, cuda:N)"));
}

}  // namespace ringtrain
