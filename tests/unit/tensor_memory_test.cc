// Tests for the counting CPU allocator: every CPU storage is counted while it lives, the peak holds
// the most alive at once, and a reset starts the peak again from what is alive.
#include "worker/trainer/tensor_memory.h"

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <cstdint>

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

// LibTorch's raw interface (used by some bf16 kernels for their workspace) needs a DataPtr whose
// context is its pointer; blocks from it are counted like tensors.
TEST(TensorMemoryTest, RawAllocationsWorkAndAreCounted) {
  InstallCpuTensorCounter();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  ASSERT_NE(allocator->raw_deleter(), nullptr);
  const int64_t before = CpuTensorBytes();
  void* block = allocator->raw_allocate(kMiB);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % 64, 0u) << "64-byte aligned";
  EXPECT_EQ(CpuTensorBytes(), before + kMiB);
  static_cast<char*>(block)[kMiB - 1] = 1;  // the whole block is ours
  allocator->raw_deallocate(block);
  EXPECT_EQ(CpuTensorBytes(), before);
  const c10::DataPtr data = allocator->allocate(16);
  EXPECT_TRUE(allocator->is_simple_data_ptr(data));
  // A bf16 matrix product, which on such CPUs takes that path.
  const at::Tensor a = torch::randn({64, 64}).to(torch::kBFloat16);
  EXPECT_EQ(torch::matmul(a, a).scalar_type(), torch::kBFloat16);
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
