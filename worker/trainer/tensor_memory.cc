#include "worker/trainer/tensor_memory.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>

namespace ringtrain {
namespace {

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};
std::atomic<bool> installed{false};

void Add(int64_t bytes) {
  const int64_t now = live_bytes.fetch_add(bytes) + bytes;
  int64_t peak = peak_bytes.load();
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
  }
}

// One counted storage: the wrapped allocator's DataPtr (which frees the memory when destroyed) and
// its size.
struct Counted {
  c10::DataPtr inner;
  int64_t bytes;
};

void DeleteCounted(void* context) {
  auto* counted = static_cast<Counted*>(context);
  live_bytes.fetch_sub(counted->bytes);
  delete counted;  // frees through the wrapped allocator's deleter
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* wrapped) : wrapped_(wrapped) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = wrapped_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    Add(static_cast<int64_t>(n));
    return {data, new Counted{std::move(inner), static_cast<int64_t>(n)}, &DeleteCounted, device};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* wrapped_;
};

}  // namespace

void InstallCpuTensorCounter() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Owned by LibTorch from here on (SetCPUAllocator's contract), alive for the process.
    c10::SetCPUAllocator(new CountingCpuAllocator(c10::GetCPUAllocator()));
    installed = true;
  });
}

bool CpuTensorCounterInstalled() { return installed.load(); }
int64_t CpuTensorBytes() { return live_bytes.load(); }
int64_t CpuTensorPeakBytes() { return peak_bytes.load(); }
void ResetCpuTensorPeak() { peak_bytes.store(live_bytes.load()); }

}  // namespace ringtrain
