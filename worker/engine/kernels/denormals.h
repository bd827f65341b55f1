// Flush-to-zero and denormals-are-zero for the threads that compute: a softmax that grows peaky or
// AdamW's tiny second moments would otherwise run into slow denormal arithmetic. Its own header so
// that the trainer, which sets them once at start-up, does not include a kernel.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_DENORMALS_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_DENORMALS_H_

namespace ringtrain {

// Sets flush-to-zero and denormals-are-zero on the calling thread and on every intra-op thread
// (the trainer calls it once at start-up; the fused CPU kernel also sets them around its own
// work). No-op off x86. Defined with the fused CPU kernel's runtime (kernels/fused_cpu_runtime.cc),
// which shares its MXCSR helpers.
void FlushDenormalsOnComputeThreads();

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_DENORMALS_H_
