// ParseDevice: the one parser of a rank's --device, shared by the trainer and the agent.
#include "common/config/device.h"

#include <gtest/gtest.h>

namespace ringtrain {
namespace {

TEST(ParseDeviceTest, CpuCudaAndIndexedCuda) {
  EXPECT_EQ(*ParseDevice("cpu"), (DeviceSpec{DeviceType::kCpu, -1}));
  EXPECT_EQ(*ParseDevice("cuda"), (DeviceSpec{DeviceType::kCuda, -1}));
  EXPECT_EQ(*ParseDevice("cuda:0"), (DeviceSpec{DeviceType::kCuda, 0}));
  EXPECT_EQ(*ParseDevice("cuda:127"), (DeviceSpec{DeviceType::kCuda, 127}));
  for (const char* text : {"cpu", "cuda", "cuda:3"}) EXPECT_EQ(ParseDevice(text)->ToString(), text);
}

TEST(ParseDeviceTest, RejectsAnythingElseNamingIt) {
  for (const char* text : {"", "tpu", "CPU", "cuda:", "cuda:-1", "cuda:+1", "cuda: 1", "cuda:1x",
                           "cuda:128", "cuda:0001", "cpu:0"}) {
    const auto parsed = ParseDevice(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(parsed.status().message()),
              std::string("device '") + text + "' is not a device (valid: cpu, cuda:N)");
  }
}

}  // namespace
}  // namespace ringtrain
