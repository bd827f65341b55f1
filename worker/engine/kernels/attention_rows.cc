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

// p (lanes j … j + N) into the float row `s`, or rounded into `p16` when given. H: round with
// VCVTNEPS2BF16 (simd::NarrowToBf16).
template <int N, bool H>
RT_INLINE void StoreRow(float* s, uint16_t* p16, int64_t j, simd::Vec<N> p) {
  if (p16 != nullptr) {
    simd::StoreBf16<N, H>(p16 + j, p);
  } else {
    simd::Store<N>(s + j, p);
  }
}
template <int N, bool H>
RT_INLINE void StoreRowPartial(float* s, uint16_t* p16, int64_t j, simd::Vec<N> p, int64_t n) {
  if (p16 != nullptr) {
    simd::StorePartialBf16<N, H>(p16 + j, p, n);
  } else {
    simd::StorePartial<N>(s + j, p, n);
  }
}
// Zeroes entries [from, n) of the float row `s`, or of `p16` when given.
RT_INLINE void ZeroRow(float* s, uint16_t* p16, int64_t from, int64_t n) {
  if (n <= from) return;
  if (p16 != nullptr) {
    std::memset(p16 + from, 0, size_t(n - from) * sizeof(uint16_t));
  } else {
    std::memset(s + from, 0, size_t(n - from) * sizeof(float));
  }
}

template <int N, bool H>
RT_INLINE void SoftmaxRowStepBody(float* s, int64_t n, int64_t visible, float* max, float* sum,
                                  float* acc, int64_t dim, uint16_t* p16) {
  // Two running maxima: the loop is not one chain of MAXPS latencies (max is exact: same result).
  simd::Vec<N> vmax = simd::Splat<N>(kNegInf), vmax2 = vmax;
  int64_t j = 0;
  for (; j + 2 * N <= visible; j += 2 * N) {
    vmax = simd::Max<N>(vmax, simd::Load<N>(s + j));
    vmax2 = simd::Max<N>(vmax2, simd::Load<N>(s + j + N));
  }
  vmax = simd::Max<N>(vmax, vmax2);
  for (; j + N <= visible; j += N) vmax = simd::Max<N>(vmax, simd::Load<N>(s + j));
  if (j < visible) vmax = simd::Max<N>(vmax, simd::LoadPartial<N>(s + j, visible - j, kNegInf));
  const float tile_max = simd::HorizontalMax<N>(vmax);
  const float new_max = tile_max > *max ? tile_max : *max;
  if (new_max == kNegInf) {  // nothing visible to this row yet
    ZeroRow(s, p16, 0, n);
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
    StoreRow<N, H>(s, p16, j, p);
    vsum += p;
  }
  if (j < visible) {
    const simd::Vec<N> p = simd::Exp<N>(simd::LoadPartial<N>(s + j, visible - j, kNegInf) - shift);
    StoreRowPartial<N, H>(s, p16, j, p, visible - j);
    vsum += p;
    j = visible;
  }
  ZeroRow(s, p16, visible, n);
  *sum += simd::HorizontalSum<N>(vsum);
}

template <int N, bool H>
RT_INLINE void ProbabilityRowBody(float* s, int64_t n, int64_t visible, float lse, uint16_t* p16) {
  if (lse == kNegInf) visible = 0;
  const simd::Vec<N> shift = simd::Splat<N>(lse);
  int64_t j = 0;
  for (; j + N <= visible; j += N) {
    const simd::Vec<N> p = simd::Exp<N>(simd::Load<N>(s + j) - shift);
    simd::Store<N>(s + j, p);
    if (p16 != nullptr) simd::StoreBf16<N, H>(p16 + j, p);
  }
  if (j < visible) {
    const simd::Vec<N> p = simd::Exp<N>(simd::LoadPartial<N>(s + j, visible - j, kNegInf) - shift);
    simd::StorePartial<N>(s + j, p, visible - j);
    if (p16 != nullptr) simd::StorePartialBf16<N, H>(p16 + j, p, visible - j);
  }
  if (n > visible) {
    std::memset(s + visible, 0, size_t(n - visible) * sizeof(float));
    if (p16 != nullptr) std::memset(p16 + visible, 0, size_t(n - visible) * sizeof(uint16_t));
  }
}

template <int N, bool H>
RT_INLINE void ScoreGradRowBody(float* dp, const float* p, int64_t n, float delta, uint16_t* ds16) {
  const simd::Vec<N> vd = simd::Splat<N>(delta);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    StoreRow<N, H>(dp, ds16, j, simd::Load<N>(p + j) * (simd::Load<N>(dp + j) - vd));
  }
  if (j < n) {
    const simd::Vec<N> ds =
        simd::LoadPartial<N>(p + j, n - j, 0.0f) * (simd::LoadPartial<N>(dp + j, n - j, 0.0f) - vd);
    StoreRowPartial<N, H>(dp, ds16, j, ds, n - j);
  }
}

template <int N, bool H>
RT_INLINE void RoundRowToBf16Body(const float* x, uint16_t* y, int64_t n) {
  int64_t j = 0;
  for (; j + N <= n; j += N) simd::StoreBf16<N, H>(y + j, simd::Load<N>(x + j));
  if (j < n) simd::StorePartialBf16<N, H>(y + j, simd::LoadPartial<N>(x + j, n - j, 0.0f), n - j);
}

template <int N>
RT_INLINE void VecExpBody(const float* x, float* y, int64_t n) {
  int64_t j = 0;
  for (; j + N <= n; j += N) simd::Store<N>(y + j, simd::Exp<N>(simd::Load<N>(x + j)));
  if (j < n)
    simd::StorePartial<N>(y + j, simd::Exp<N>(simd::LoadPartial<N>(x + j, n - j, 0.0f)), n - j);
}

struct RowFunctions {
  void (*softmax_step)(float*, int64_t, int64_t, float*, float*, float*, int64_t, uint16_t*);
  void (*probability)(float*, int64_t, int64_t, float, uint16_t*);
  void (*score_grad)(float*, const float*, int64_t, float, uint16_t*);
  void (*scale)(float*, int64_t, float);
  void (*round_bf16)(const float*, uint16_t*, int64_t);
  void (*exp)(const float*, float*, int64_t);
};

#define RT_ROW_FUNCTIONS(SUFFIX, N, H, ATTR)                                                     \
  ATTR void SoftmaxRowStep##SUFFIX(float* s, int64_t n, int64_t visible, float* max, float* sum, \
                                   float* acc, int64_t dim, uint16_t* p16) {                     \
    SoftmaxRowStepBody<N, H>(s, n, visible, max, sum, acc, dim, p16);                            \
  }                                                                                              \
  ATTR void ProbabilityRow##SUFFIX(float* s, int64_t n, int64_t visible, float lse,              \
                                   uint16_t* p16) {                                              \
    ProbabilityRowBody<N, H>(s, n, visible, lse, p16);                                           \
  }                                                                                              \
  ATTR void ScoreGradRow##SUFFIX(float* dp, const float* p, int64_t n, float delta,              \
                                 uint16_t* ds16) {                                               \
    ScoreGradRowBody<N, H>(dp, p, n, delta, ds16);                                               \
  }                                                                                              \
  ATTR void ScaleRow##SUFFIX(float* x, int64_t n, float a) { ScaleRowBody<N>(x, n, a); }         \
  ATTR void RoundRowToBf16##SUFFIX(const float* x, uint16_t* y, int64_t n) {                     \
    RoundRowToBf16Body<N, H>(x, y, n);                                                           \
  }                                                                                              \
  ATTR void VecExp##SUFFIX(const float* x, float* y, int64_t n) { VecExpBody<N>(x, y, n); }      \
  constexpr RowFunctions k##SUFFIX##Rows = {SoftmaxRowStep##SUFFIX, ProbabilityRow##SUFFIX,      \
                                            ScoreGradRow##SUFFIX,   ScaleRow##SUFFIX,            \
                                            RoundRowToBf16##SUFFIX, VecExp##SUFFIX};

RT_ROW_FUNCTIONS(Baseline, 8, false, )
#if defined(__x86_64__)
RT_ROW_FUNCTIONS(Avx2, 8, false, __attribute__((target("avx2,fma"))))
RT_ROW_FUNCTIONS(Avx512, 16, false,
                 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))))
RT_ROW_FUNCTIONS(Avx512Bf16, 16, true,
                 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))))
#endif

// Indexed by CpuIsa; the levels a build for another architecture lacks run the baseline.
const RowFunctions& Rows() {
#if defined(__x86_64__)
  static constexpr RowFunctions kRows[kCpuIsaCount] = {kBaselineRows, kAvx2Rows, kAvx512Rows,
                                                       kAvx512Bf16Rows};
#else
  static constexpr RowFunctions kRows[kCpuIsaCount] = {kBaselineRows, kBaselineRows, kBaselineRows,
                                                       kBaselineRows};
#endif
  return kRows[static_cast<int>(ActiveCpuIsa())];
}

}  // namespace

void SoftmaxRowStep(float* s, int64_t n, int64_t visible, float* max, float* sum, float* acc,
                    int64_t dim, uint16_t* p16) {
  Rows().softmax_step(s, n, visible, max, sum, acc, dim, p16);
}
void ProbabilityRow(float* s, int64_t n, int64_t visible, float lse, uint16_t* p16) {
  Rows().probability(s, n, visible, lse, p16);
}
void ScoreGradRow(float* dp, const float* p, int64_t n, float delta, uint16_t* ds16) {
  Rows().score_grad(dp, p, n, delta, ds16);
}
void ScaleRow(float* x, int64_t n, float a) { Rows().scale(x, n, a); }
void RoundRowToBf16(const float* x, uint16_t* y, int64_t n) { Rows().round_bf16(x, y, n); }
void VecExp(const float* x, float* y, int64_t n) { Rows().exp(x, y, n); }
const char* AttentionRowsIsa() { return CpuIsaName(ActiveCpuIsa()); }

}  // namespace ringtrain
