// AdamW's update of float32 parameters in one pass over memory (optim/adamw.h calls it on CPU
// tensors): the ATen chain it replaces reads and writes the parameters and both moments about
// twenty times a step, this reads p, g, m and v once and writes p, m and v once. Vectorised by the
// compiler at the level cpu_isa.h chooses; the arithmetic is the same at every level (no
// contraction into FMA), so the result does not depend on the CPU. Torch-free.
//
// Per element, in this order, each operation rounded to float32 (torch.optim.AdamW's single-tensor
// update; ATen fuses the two moment updates' multiply-adds and its CPU sqrt is not correctly
// rounded, so the two agree to about an ulp, not bitwise):
//   p ← p·decay
//   m ← m·beta1 + one_minus_beta1·g
//   v ← v·beta2 + (one_minus_beta2·g)·g
//   p ← p + (neg_step_size·m) / (sqrt(v) / bias_correction2_sqrt + eps)
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_ADAMW_ROWS_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_ADAMW_ROWS_H_

#include <cstdint>

namespace ringtrain {

struct AdamWScalars {
  float decay = 1;  // 1 − lr · weight_decay
  float beta1 = 0.9f;
  float one_minus_beta1 = 0.1f;
  float beta2 = 0.95f;
  float one_minus_beta2 = 0.05f;
  float bias_correction2_sqrt = 1;
  float eps = 1e-8f;
  float neg_step_size = 0;  // −lr / bias_correction1
};

// Where the updated values also go (a snapshot's buffer): three arrays of n floats, or null.
struct AdamWCopies {
  float* p = nullptr;
  float* m = nullptr;
  float* v = nullptr;
};

// Updates n elements of p, m and v in place from g; with `copies` also writes them there.
void AdamWUpdate(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s,
                 const AdamWCopies& copies = {});

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_ADAMW_ROWS_H_
