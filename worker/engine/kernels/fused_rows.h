// The row code of the fused element-wise blocks (model/fused_blocks.h): RMSNorm, RoPE and SwiGLU,
// forward and backward, one row (or one token's heads) a call, vectorised with simd.h at the
// level cpu_isa.h chooses. The callers thread over rows. Activations are float32 or bfloat16 (as
// their 16 bits, T = uint16_t), read widened to float32 and written rounded to nearest even;
// statistics, weights and weight gradients are float32. No denormal is produced (exp's results
// below 2^-126 are 0). Torch-free.
//
// C the row length (model dim), D the head dim (even: D/2 interleaved pairs), F the FFN width.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_ROWS_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_ROWS_H_

#include <cstdint>

namespace ringtrain {

// RMSNorm of one row x (C): rstd = 1/sqrt(mean(x²) + eps), y = (x·rstd)·w. In bfloat16 the normed
// row is rounded before the weight (also rounded) multiplies it, as the ATen chain
// (x.float() · rsqrt(…)).to(bf16) · w.to(bf16) does. Returns rstd (the backward's statistic).
template <typename T>
float RmsNormRow(const T* x, const float* w, T* y, int64_t c, float eps);

// Its backward for one row: dx (C) from dy, x and the forward's rstd; adds dy·(x·rstd) into
// dw_acc (C, float32; the caller sums rows in a fixed order).
template <typename T>
void RmsNormGradRow(const T* dy, const T* x, const float* w, float rstd, T* dx, float* dw_acc,
                    int64_t c);

// RoPE on one token's `heads` heads: head h of `in` (at in + h·in_stride, D) rotated pair-wise,
// (re, im) → (re·cos − im·sin, re·sin + im·cos), into out + h·out_stride. `cos2` and `sin2` (D)
// hold the token's angle per pair twice: cos2 = (c0, c0, c1, c1, …), sin2 = (−s0, s0, −s1, s1, …)
// — pass −sin2 (sin2 = (s0, −s0, …)) for the inverse rotation (the backward). In and out may not
// alias.
template <typename T>
void RotateHeads(const T* in, int64_t in_stride, T* out, int64_t out_stride, int64_t heads,
                 int64_t d, const float* cos2, const float* sin2);

// SwiGLU on n elements: h = silu(a)·b, silu(a) = a / (1 + exp(−a)).
template <typename T>
void SwiGluRow(const T* a, const T* b, T* h, int64_t n);
// Its backward: da = dh·b·s·(1 + a·(1 − s)), db = dh·silu(a), s = sigmoid(a).
template <typename T>
void SwiGluGradRow(const T* dh, const T* a, const T* b, T* da, T* db, int64_t n);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_ROWS_H_
