// The element-wise row work of the fused CPU attention kernel (fused_cpu_attention.h), vectorised
// with simd.h's vectors and exp at the level cpu_isa.h chooses (AVX-512, AVX2 + FMA or the
// baseline). Torch-free. exp results below 2^-126 are exactly 0: no denormal is ever produced.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_ATTENTION_ROWS_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_ATTENTION_ROWS_H_

#include <cstdint>

namespace ringtrain {

// One step of online softmax on a score row `s` of `n` entries of which the first `visible` are
// seen by the row's query (the rest are masked). With the row's running `max` and `sum` (start:
// −inf, 0) and its output accumulator `acc` (`dim` entries): rescales sum and acc to the new max,
// writes p = exp(s − max) into s (0 past `visible`) — or, given `p16`, into p16 rounded to
// bfloat16 and not into s — and adds Σp (unrounded) to sum. A row with nothing visible yet keeps
// max −inf and gets p = 0.
void SoftmaxRowStep(float* s, int64_t n, int64_t visible, float* max, float* sum, float* acc,
                    int64_t dim, uint16_t* p16 = nullptr);

// s[j] = exp(s[j] − lse) for j < visible, 0 for the rest (`lse` −inf: all 0); given `p16`, the
// same rounded to bfloat16 into p16 too.
void ProbabilityRow(float* s, int64_t n, int64_t visible, float lse, uint16_t* p16 = nullptr);

// dp[j] = p[j] · (dp[j] − delta): the score gradient dS from dP, in place — or, given `ds16`,
// into ds16 rounded to bfloat16 and not into dp.
void ScoreGradRow(float* dp, const float* p, int64_t n, float delta, uint16_t* ds16 = nullptr);

// y[j] = x[j] rounded to bfloat16 (nearest even, as PyTorch's float → bfloat16), as its 16 bits:
// the rounding the row functions above use for their bfloat16 outputs, for the tests.
void RoundRowToBf16(const float* x, uint16_t* y, int64_t n);

// x[j] *= a.
void ScaleRow(float* x, int64_t n, float a);

// exp of each of x[0..n) into y (both may alias): the same exp the rows use, for the tests.
void VecExp(const float* x, float* y, int64_t n);

// "avx512_bf16", "avx512", "avx2" or "baseline": the level the row functions run (ActiveCpuIsa()).
const char* AttentionRowsIsa();

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_ATTENTION_ROWS_H_
