// Tensor memory on the CPU: a CPU allocator that wraps LibTorch's default one and counts the bytes
// of every live CPU tensor storage, so a CPU rank reports its step's peak tensor memory
// (`device_memory_peak_bytes`) as a CUDA rank reports the caching allocator's — without the
// process's libraries and heap slack that its RSS (`peak_memory_bytes`) includes.
//
// Thread-safe: the counters are atomics, updated by whichever thread allocates or frees.
#ifndef RINGTRAIN_WORKER_TRAINER_TENSOR_MEMORY_H_
#define RINGTRAIN_WORKER_TRAINER_TENSOR_MEMORY_H_

#include <cstdint>

namespace ringtrain {

// Makes the counting allocator LibTorch's CPU allocator. Call once, before the first tensor:
// storages allocated earlier are not counted (they free through their own allocator). Later calls
// do nothing.
void InstallCpuTensorCounter();

// Whether InstallCpuTensorCounter has run (the figures below are 0 until then).
bool CpuTensorCounterInstalled();

int64_t CpuTensorBytes();      // bytes of the CPU storages alive now
int64_t CpuTensorPeakBytes();  // the most alive at once since the last reset (or the install)
void ResetCpuTensorPeak();     // the peak starts again from what is alive now

// The most CPU tensor bytes alive at once above those alive at construction, which resets the
// peak: what one piece of work (a checkpoint save or load) added at its worst. 0 when the counter
// is not installed.
class ScopedCpuTensorPeak {
 public:
  ScopedCpuTensorPeak() : base_(CpuTensorBytes()) { ResetCpuTensorPeak(); }
  int64_t extra_bytes() const {
    const int64_t extra = CpuTensorPeakBytes() - base_;
    return extra > 0 ? extra : 0;
  }

 private:
  int64_t base_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_TENSOR_MEMORY_H_
