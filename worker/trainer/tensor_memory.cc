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

// Each block is the wrapped allocator's raw block with a header in front that holds the size; the
// data starts kHeader bytes in (64: the alignment the CPU allocator gives, kept). So the DataPtr's
// context is its data pointer, as LibTorch's raw_allocate/raw_deallocate require (some bf16
// kernels on CPUs with AVX512-BF16/AMX allocate their workspace that way).
constexpr size_t kHeader = 64;

c10::Allocator* wrapped = nullptr;  // the CPU allocator before ours; set once, before any use

void DeleteCounted(void* data) {
  if (data == nullptr) return;
  char* base = static_cast<char*>(data) - kHeader;
  live_bytes.fetch_sub(*reinterpret_cast<int64_t*>(base));
  wrapped->raw_deallocate(base);
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    char* base = static_cast<char*>(wrapped->raw_allocate(n + kHeader));
    *reinterpret_cast<int64_t*>(base) = static_cast<int64_t>(n);
    Add(static_cast<int64_t>(n));
    void* data = base + kHeader;
    return {data, data, &DeleteCounted, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &DeleteCounted; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

void InstallCpuTensorCounter() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The wrapped allocator hands out raw blocks (its DataPtr's context is its pointer).
    wrapped = c10::GetCPUAllocator();
    // Owned by LibTorch from here on (SetCPUAllocator's contract), alive for the process.
    c10::SetCPUAllocator(new CountingCpuAllocator());
    installed = true;
  });
}

bool CpuTensorCounterInstalled() { return installed.load(); }
int64_t CpuTensorBytes() { return live_bytes.load(); }
int64_t CpuTensorPeakBytes() { return peak_bytes.load(); }
void ResetCpuTensorPeak() { peak_bytes.store(live_bytes.load()); }

}  // namespace ringtrain
