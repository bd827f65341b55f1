#include "worker/engine/kernels/attention_rows.h"

#include <cstring>

#include "worker/engine/kernels/cpu_isa.h"
#include "worker/engine/kernels/simd.h"

namespace ringtrain {
namespace {

using simd::kNegInf;

// ---- the bodies, compiled once per instruction set below ----

template <int N>
RT_INLINE void ScaleRowBody(float* x, int64_t n, float a) {
  const simd::Vec<N> va = simd::Splat<N>(a);
  int64_t j = 0;
  for (; j + N <= n; j += N) simd::Store<N>(x + j, simd::Load<N>(x + j) * va);
  for (; j < n; ++j) x[j] *= a;
}

template <int N>
RT_INLINE void SoftmaxRowStepBody(float* s, int64_t n, int64_t visible, float* max, float* sum,
                                  float* acc, int64_t dim) {
  simd::Vec<N> vmax = simd::Splat<N>(kNegInf);
  int64_t j = 0;
  for (; j + N <= visible; j += N) vmax = simd::Max<N>(vmax, simd::Load<N>(s + j));
  if (j < visible) vmax = simd::Max<N>(vmax, simd::LoadPartial<N>(s + j, visible - j, kNegInf));
  const float tile_max = simd::HorizontalMax<N>(vmax);
  const float new_max = tile_max > *max ? tile_max : *max;
  if (new_max == kNegInf) {  // nothing visible to this row yet
    std::memset(s, 0, size_t(n) * sizeof(float));
    return;
  }
  if (*max != new_max) {
    // The first tile with a visible key: sum and acc are still 0 (and exp(−inf) would be 0 too).
    const float rescale = *max == kNegInf ? 0.0f : simd::Exp<N>(simd::Splat<N>(*max - new_max))[0];
    *sum *= rescale;
    ScaleRowBody<N>(acc, dim, rescale);
    *max = new_max;
  }
  const simd::Vec<N> shift = simd::Splat<N>(new_max);
  simd::Vec<N> vsum = simd::Splat<N>(0.0f);
  j = 0;
  for (; j + N <= visible; j += N) {
    const simd::Vec<N> p = simd::Exp<N>(simd::Load<N>(s + j) - shift);
    simd::Store<N>(s + j, p);
    vsum += p;
  }
  if (j < visible) {
    const simd::Vec<N> p = simd::Exp<N>(simd::LoadPartial<N>(s + j, visible - j, kNegInf) - shift);
    simd::StorePartial<N>(s + j, p, visible - j);
    vsum += p;
    j = visible;
  }
  if (n > visible) std::memset(s + visible, 0, size_t(n - visible) * sizeof(float));
  *sum += simd::HorizontalSum<N>(vsum);
}

template <int N>
RT_INLINE void ProbabilityRowBody(float* s, int64_t n, int64_t visible, float lse) {
  if (lse == kNegInf) visible = 0;
  const simd::Vec<N> shift = simd::Splat<N>(lse);
  int64_t j = 0;
  for (; j + N <= visible; j += N)
    simd::Store<N>(s + j, simd::Exp<N>(simd::Load<N>(s + j) - shift));
  if (j < visible) {
    simd::StorePartial<N>(s + j,
                          simd::Exp<N>(simd::LoadPartial<N>(s + j, visible - j, kNegInf) - shift),
                          visible - j);
  }
  if (n > visible) std::memset(s + visible, 0, size_t(n - visible) * sizeof(float));
}

template <int N>
RT_INLINE void ScoreGradRowBody(float* dp, const float* p, int64_t n, float delta) {
  const simd::Vec<N> vd = simd::Splat<N>(delta);
  int64_t j = 0;
  for (; j + N <= n; j += N)
    simd::Store<N>(dp + j, simd::Load<N>(p + j) * (simd::Load<N>(dp + j) - vd));
  for (; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
}

template <int N>
RT_INLINE void VecExpBody(const float* x, float* y, int64_t n) {
  int64_t j = 0;
  for (; j + N <= n; j += N) simd::Store<N>(y + j, simd::Exp<N>(simd::Load<N>(x + j)));
  if (j < n)
    simd::StorePartial<N>(y + j, simd::Exp<N>(simd::LoadPartial<N>(x + j, n - j, 0.0f)), n - j);
}

struct RowFunctions {
  void (*softmax_step)(float*, int64_t, int64_t, float*, float*, float*, int64_t);
  void (*probability)(float*, int64_t, int64_t, float);
  void (*score_grad)(float*, const float*, int64_t, float);
  void (*scale)(float*, int64_t, float);
  void (*exp)(const float*, float*, int64_t);
};

#define RT_ROW_FUNCTIONS(SUFFIX, N, ATTR)                                                        \
  ATTR void SoftmaxRowStep##SUFFIX(float* s, int64_t n, int64_t visible, float* max, float* sum, \
                                   float* acc, int64_t dim) {                                    \
    SoftmaxRowStepBody<N>(s, n, visible, max, sum, acc, dim);                                    \
  }                                                                                              \
  ATTR void ProbabilityRow##SUFFIX(float* s, int64_t n, int64_t visible, float lse) {            \
    ProbabilityRowBody<N>(s, n, visible, lse);                                                   \
  }                                                                                              \
  ATTR void ScoreGradRow##SUFFIX(float* dp, const float* p, int64_t n, float delta) {            \
    ScoreGradRowBody<N>(dp, p, n, delta);                                                        \
  }                                                                                              \
  ATTR void ScaleRow##SUFFIX(float* x, int64_t n, float a) { ScaleRowBody<N>(x, n, a); }         \
  ATTR void VecExp##SUFFIX(const float* x, float* y, int64_t n) { VecExpBody<N>(x, y, n); }      \
  constexpr RowFunctions k##SUFFIX##Rows = {SoftmaxRowStep##SUFFIX, ProbabilityRow##SUFFIX,      \
                                            ScoreGradRow##SUFFIX, ScaleRow##SUFFIX,              \
                                            VecExp##SUFFIX};

RT_ROW_FUNCTIONS(Baseline, 8, )
#if defined(__x86_64__)
RT_ROW_FUNCTIONS(Avx2, 8, __attribute__((target("avx2,fma"))))
RT_ROW_FUNCTIONS(Avx512, 16, __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))))
#endif

// Indexed by CpuIsa; the levels a build for another architecture lacks run the baseline.
const RowFunctions& Rows() {
#if defined(__x86_64__)
  static constexpr RowFunctions kRows[kCpuIsaCount] = {kBaselineRows, kAvx2Rows, kAvx512Rows};
#else
  static constexpr RowFunctions kRows[kCpuIsaCount] = {kBaselineRows, kBaselineRows, kBaselineRows};
#endif
  return kRows[static_cast<int>(ActiveCpuIsa())];
}

}  // namespace

void SoftmaxRowStep(float* s, int64_t n, int64_t visible, float* max, float* sum, float* acc,
                    int64_t dim) {
  Rows().softmax_step(s, n, visible, max, sum, acc, dim);
}
void ProbabilityRow(float* s, int64_t n, int64_t visible, float lse) {
  Rows().probability(s, n, visible, lse);
}
void ScoreGradRow(float* dp, const float* p, int64_t n, float delta) {
  Rows().score_grad(dp, p, n, delta);
}
void ScaleRow(float* x, int64_t n, float a) { Rows().scale(x, n, a); }
void VecExp(const float* x, float* y, int64_t n) { Rows().exp(x, y, n); }
const char* AttentionRowsIsa() { return CpuIsaName(ActiveCpuIsa()); }

}  // namespace ringtrain
