// Tests for the counting CPU allocator: every CPU storage is counted while it lives, the peak holds
// the most alive at once, and a reset starts the peak again from what is alive.
#include "worker/trainer/tensor_memory.h"

#include <torch/torch.h>

#include "gtest/gtest.h"

namespace ringtrain {
namespace {

constexpr int64_t kMiB = 1 << 20;

TEST(TensorMemoryTest, CountsLiveAndPeakBytesOfCpuTensors) {
  InstallCpuTensorCounter();
  InstallCpuTensorCounter();  // a second call changes nothing
  ASSERT_TRUE(CpuTensorCounterInstalled());
  const int64_t before = CpuTensorBytes();
  ResetCpuTensorPeak();
  {
    const at::Tensor a = torch::zeros({kMiB / 4}, torch::kFloat32);  // 1 MiB
    EXPECT_EQ(CpuTensorBytes(), before + kMiB);
    {
      const at::Tensor b = torch::empty({kMiB}, torch::kBFloat16);  // 2 MiB
      EXPECT_EQ(CpuTensorBytes(), before + 3 * kMiB);
      const at::Tensor view = b.view({2, -1});  // a view shares the storage
      EXPECT_EQ(CpuTensorBytes(), before + 3 * kMiB);
    }
    EXPECT_EQ(CpuTensorBytes(), before + kMiB);
    EXPECT_EQ(CpuTensorPeakBytes(), before + 3 * kMiB);
    ResetCpuTensorPeak();
    EXPECT_EQ(CpuTensorPeakBytes(), before + kMiB);
    const at::Tensor sum = a + a;  // an op's output comes from the same allocator
    EXPECT_EQ(CpuTensorPeakBytes(), before + 2 * kMiB);
  }
  EXPECT_EQ(CpuTensorBytes(), before);
}

TEST(TensorMemoryTest, CountedTensorsWorkAsUsual) {
  InstallCpuTensorCounter();
  const at::Tensor x = torch::arange(12, torch::kFloat32).view({3, 4});
  const at::Tensor copy = x.clone();
  EXPECT_TRUE(torch::equal(copy, x));
  EXPECT_EQ(copy.sum().item<float>(), 66.0f);
}

}  // namespace
}  // namespace ringtrain
