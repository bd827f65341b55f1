// device_probe.h: the /proc parsers on fixture text, the CUDA index mapping, and the probes as they
// run on this machine (the CPU for real; NVML with a library name that cannot be loaded, and the
// real libnvidia-ml.so.1 whether or not this machine has a driver).
#include "worker/agent/device_probe.h"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace ringtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The first lines of a real /proc/cpuinfo (two processors, x86), tabs as the kernel writes them.
constexpr char kCpuinfoX86[] =
    "processor\t: 0\n"
    "vendor_id\t: AuthenticAMD\n"
    "cpu family\t: 25\n"
    "model\t\t: 1\n"
    "model name\t: AMD EPYC 7B13 64-Core Processor\n"
    "stepping\t: 1\n"
    "\n"
    "processor\t: 1\n"
    "model\t\t: 1\n"
    "model name\t: AMD EPYC 7B13 64-Core Processor\n";
// An arm64 /proc/cpuinfo: no "model name" at all.
constexpr char kCpuinfoArm[] =
    "processor\t: 0\n"
    "BogoMIPS\t: 50.00\n"
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n"
    "CPU implementer\t: 0x41\n"
    "CPU part\t: 0xd0c\n";
constexpr char kMeminfo[] =
    "MemTotal:       24683584 kB\n"
    "MemFree:        20015652 kB\n"
    "MemAvailable:   23708196 kB\n";

TEST(CpuModelNameTest, TakesTheFirstModelNameNotTheModelNumber) {
  EXPECT_EQ(*CpuModelName(kCpuinfoX86), "AMD EPYC 7B13 64-Core Processor");
}

TEST(CpuModelNameTest, NotFoundWithoutOne) {
  const auto name = CpuModelName(kCpuinfoArm);
  ASSERT_FALSE(name.ok());
  EXPECT_EQ(name.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(name.status().message()), HasSubstr("no \"model name\""));
  EXPECT_FALSE(CpuModelName("").ok());
  EXPECT_FALSE(CpuModelName("model name\t:   \n").ok());  // present but empty
}

TEST(MemTotalBytesTest, KibToBytes) {
  EXPECT_EQ(*MemTotalBytes(kMeminfo), uint64_t{24683584} * 1024);
  EXPECT_EQ(*MemTotalBytes("MemFree: 1 kB\nMemTotal: 2 kB"), 2048u);  // no final newline
}

TEST(MemTotalBytesTest, RefusesWhatIsNotANumberOfKib) {
  for (const char* text : {"MemTotal: lots kB\n", "MemTotal: 12 MB\n", "MemTotal: -3 kB\n",
                           "MemTotal: 99999999999999999999 kB\n"}) {
    const auto bytes = MemTotalBytes(text);
    ASSERT_FALSE(bytes.ok()) << text;
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(bytes.status().message()), HasSubstr("MemTotal:")) << text;
  }
  EXPECT_EQ(MemTotalBytes("MemFree: 1 kB\n").status().code(), absl::StatusCode::kNotFound);
}

TEST(GpuCountTextTest, NamesTheValidDevices) {
  EXPECT_EQ(GpuCountText(0), "this machine has no NVIDIA GPU");
  EXPECT_EQ(GpuCountText(1), "this machine has 1 NVIDIA GPU (valid: cuda:0)");
  EXPECT_EQ(GpuCountText(8), "this machine has 8 NVIDIA GPUs (valid: cuda:0 .. cuda:7)");
}

TEST(NvmlTargetForTest, UnsetVariableIsTheDriversIndex) {
  const NvmlTarget t = *NvmlTargetFor(3, std::nullopt);
  EXPECT_EQ(t.nvml_index, 3u);
  EXPECT_EQ(t.uuid, "");
}

TEST(NvmlTargetForTest, VisibleDevicesRemapIndicesAndUuids) {
  EXPECT_EQ(NvmlTargetFor(0, "2,3")->nvml_index, 2u);
  EXPECT_EQ(NvmlTargetFor(1, "2, 3")->nvml_index, 3u);
  const NvmlTarget uuid = *NvmlTargetFor(0, "GPU-8f6c1a2e-0000-1111-2222-333344445555");
  EXPECT_FALSE(uuid.nvml_index.has_value());
  EXPECT_EQ(uuid.uuid, "GPU-8f6c1a2e-0000-1111-2222-333344445555");
}

TEST(NvmlTargetForTest, IndexPastTheVisibleOnesNamesTheVariable) {
  const auto past = NvmlTargetFor(2, "0,1");
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(past.status().message(),
            "CUDA_VISIBLE_DEVICES='0,1' makes 2 NVIDIA GPUs visible (valid: cuda:0 .. cuda:1)");
  EXPECT_EQ(NvmlTargetFor(0, "").status().message(),
            "CUDA_VISIBLE_DEVICES='' makes 0 NVIDIA GPUs visible");
}

TEST(ProbeDeviceTest, CpuOfThisMachine) {
  const auto info = ProbeDevice(DeviceSpec{DeviceType::kCpu, -1});
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->name.empty());
  EXPECT_GT(info->memory_bytes, uint64_t{64} << 20);  // any machine that runs this has 64 MiB
}

TEST(ProbeDeviceTest, MissingNvmlNamesTheDeviceAndTheLibrary) {
  const auto info =
      ProbeDevice(DeviceSpec{DeviceType::kCuda, 1}, "libnvidia-ml-not-installed.so.1");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(info.status().message()),
              StartsWith("device 'cuda:1': no NVIDIA driver (libnvidia-ml-not-installed.so.1"));
}

// The real library: on a machine without a driver (CI) the error, on one with a GPU its name.
TEST(ProbeDeviceTest, RealNvmlEitherDescribesGpuZeroOrSaysWhyNot) {
  void* nvml = dlopen(kNvmlLibrary, RTLD_NOW | RTLD_LOCAL);
  const auto info = ProbeDevice(DeviceSpec{DeviceType::kCuda, 0});
  if (nvml == nullptr) {
    ASSERT_FALSE(info.ok());
    EXPECT_THAT(std::string(info.status().message()),
                StartsWith("device 'cuda:0': no NVIDIA driver (libnvidia-ml.so.1"));
    return;
  }
  dlclose(nvml);
  if (info.ok()) {
    EXPECT_THAT(info->name, HasSubstr("NVIDIA"));
    EXPECT_GT(info->memory_bytes, uint64_t{1} << 30);
  } else {
    EXPECT_THAT(std::string(info.status().message()), StartsWith("device 'cuda:0': "));
  }
  // An index no machine has is refused with the count.
  const auto far = ProbeDevice(DeviceSpec{DeviceType::kCuda, 127});
  if (info.ok() && std::getenv("CUDA_VISIBLE_DEVICES") == nullptr) {
    ASSERT_FALSE(far.ok());
    EXPECT_THAT(std::string(far.status().message()),
                StartsWith("device 'cuda:127': this machine has "));
  }
}

TEST(RegisteredDeviceInfoTest, AFailedProbeIsUnknownWithItsReason) {
  const DeviceSpec cuda3{DeviceType::kCuda, 3};
  const DeviceInfo info = RegisteredDeviceInfo(
      cuda3, absl::FailedPreconditionError(
                 "device 'cuda:3': this machine has 1 NVIDIA GPU (valid: cuda:0)"));
  EXPECT_EQ(info.name, "unknown (this machine has 1 NVIDIA GPU (valid: cuda:0))");
  EXPECT_EQ(info.memory_bytes, 0u);
}

TEST(RegisteredDeviceInfoTest, NameIsPrintableAsciiAndBounded) {
  const DeviceSpec cpu{DeviceType::kCpu, -1};
  const DeviceInfo evil = RegisteredDeviceInfo(cpu, DeviceInfo{"Caf\xc3\xa9\x1b[2J CPU", 7});
  EXPECT_EQ(evil.name, "Caf??\?[2J CPU");
  EXPECT_EQ(evil.memory_bytes, 7u);
  const DeviceInfo long_name = RegisteredDeviceInfo(cpu, DeviceInfo{std::string(300, 'x'), 1});
  EXPECT_EQ(long_name.name.size(), kMaxDeviceNameLength);
  EXPECT_EQ(long_name.name.substr(kMaxDeviceNameLength - 3), "...");
}

}  // namespace
}  // namespace ringtrain
