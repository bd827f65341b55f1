#include "worker/engine/kernels/attention_rows.h"

#include <cmath>
#include <cstring>
#include <limits>

// The 8-float vectors below live in registers inside always-inline helpers; the note that passing
// them by value would change the ABI without AVX does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace ringtrain {
namespace {

// 8 floats; GCC lowers the operators to one AVX register under target("avx2,fma") and to two SSE
// registers otherwise.
typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
constexpr int64_t kLanes = 8;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

#define RT_INLINE inline __attribute__((always_inline))

RT_INLINE F8 Splat(float x) { return F8{x, x, x, x, x, x, x, x}; }
RT_INLINE F8 Load(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
RT_INLINE void Store(float* p, F8 v) { std::memcpy(p, &v, sizeof v); }
// The first n (< 8) lanes from p, the others `fill`.
RT_INLINE F8 LoadPartial(const float* p, int64_t n, float fill) {
  F8 v = Splat(fill);
  std::memcpy(&v, p, size_t(n) * sizeof(float));
  return v;
}
RT_INLINE void StorePartial(float* p, F8 v, int64_t n) {
  std::memcpy(p, &v, size_t(n) * sizeof(float));
}
RT_INLINE F8 Select(I8 mask, F8 a, F8 b) {
  return reinterpret_cast<F8>((reinterpret_cast<I8>(a) & mask) | (reinterpret_cast<I8>(b) & ~mask));
}
RT_INLINE F8 Max(F8 a, F8 b) { return Select(a > b, a, b); }
RT_INLINE float HorizontalMax(F8 v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
RT_INLINE float HorizontalSum(F8 v) {
  // Pairwise, in a fixed order.
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

RT_INLINE F8 Exp(F8 x) {
  const I8 underflow = x < Splat(-87.0f);         // also −inf (and NaN compares false: stays NaN)
  x = Select(x > Splat(88.0f), Splat(88.0f), x);  // exp(88) < FLT_MAX
  x = Select(underflow, Splat(0.0f), x);
  // n = round(x / ln2) by the 1.5·2^23 trick, exact for |x / ln2| < 2^22.
  const F8 magic = Splat(12582912.0f);
  const F8 fn = (x * Splat(1.44269504088896341f) + magic) - magic;
  // r = x − n·ln2 in two parts (Cody–Waite).
  F8 r = x - fn * Splat(0.693359375f);
  r = r - fn * Splat(-2.12194440e-4f);
  F8 p = Splat(1.9875691500E-4f);
  p = p * r + Splat(1.3981999507E-3f);
  p = p * r + Splat(8.3334519073E-3f);
  p = p * r + Splat(4.1665795894E-2f);
  p = p * r + Splat(1.6666665459E-1f);
  p = p * r + Splat(5.0000001201E-1f);
  p = p * (r * r) + r + Splat(1.0f);
  const I8 n = __builtin_convertvector(fn, I8);
  const F8 two_n = reinterpret_cast<F8>((n + 127) << 23);
  return Select(underflow, Splat(0.0f), p * two_n);
}

// ---- the bodies, compiled once per instruction set below ----

RT_INLINE void ScaleRowBody(float* x, int64_t n, float a) {
  const F8 va = Splat(a);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) Store(x + j, Load(x + j) * va);
  for (; j < n; ++j) x[j] *= a;
}

RT_INLINE void SoftmaxRowStepBody(float* s, int64_t n, int64_t visible, float* max, float* sum,
                                  float* acc, int64_t dim) {
  F8 vmax = Splat(kNegInf);
  int64_t j = 0;
  for (; j + kLanes <= visible; j += kLanes) vmax = Max(vmax, Load(s + j));
  if (j < visible) vmax = Max(vmax, LoadPartial(s + j, visible - j, kNegInf));
  const float tile_max = HorizontalMax(vmax);
  const float new_max = tile_max > *max ? tile_max : *max;
  if (new_max == kNegInf) {  // nothing visible to this row yet
    std::memset(s, 0, size_t(n) * sizeof(float));
    return;
  }
  if (*max != new_max) {
    // The first tile with a visible key: sum and acc are still 0 (and exp(−inf) would be 0 too).
    const float rescale = *max == kNegInf ? 0.0f : Exp(Splat(*max - new_max))[0];
    *sum *= rescale;
    ScaleRowBody(acc, dim, rescale);
    *max = new_max;
  }
  const F8 shift = Splat(new_max);
  F8 vsum = Splat(0.0f);
  j = 0;
  for (; j + kLanes <= visible; j += kLanes) {
    const F8 p = Exp(Load(s + j) - shift);
    Store(s + j, p);
    vsum += p;
  }
  if (j < visible) {
    const F8 p = Exp(LoadPartial(s + j, visible - j, kNegInf) - shift);
    StorePartial(s + j, p, visible - j);
    vsum += p;
    j = visible;
  }
  if (n > visible) std::memset(s + visible, 0, size_t(n - visible) * sizeof(float));
  *sum += HorizontalSum(vsum);
}

RT_INLINE void ProbabilityRowBody(float* s, int64_t n, int64_t visible, float lse) {
  if (lse == kNegInf) visible = 0;
  const F8 shift = Splat(lse);
  int64_t j = 0;
  for (; j + kLanes <= visible; j += kLanes) Store(s + j, Exp(Load(s + j) - shift));
  if (j < visible) {
    StorePartial(s + j, Exp(LoadPartial(s + j, visible - j, kNegInf) - shift), visible - j);
  }
  if (n > visible) std::memset(s + visible, 0, size_t(n - visible) * sizeof(float));
}

RT_INLINE void ScoreGradRowBody(float* dp, const float* p, int64_t n, float delta) {
  const F8 vd = Splat(delta);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) Store(dp + j, Load(p + j) * (Load(dp + j) - vd));
  for (; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
}

RT_INLINE void VecExpBody(const float* x, float* y, int64_t n) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) Store(y + j, Exp(Load(x + j)));
  if (j < n) StorePartial(y + j, Exp(LoadPartial(x + j, n - j, 0.0f)), n - j);
}

struct RowFunctions {
  void (*softmax_step)(float*, int64_t, int64_t, float*, float*, float*, int64_t);
  void (*probability)(float*, int64_t, int64_t, float);
  void (*score_grad)(float*, const float*, int64_t, float);
  void (*scale)(float*, int64_t, float);
  void (*exp)(const float*, float*, int64_t);
  const char* isa;
};

#define RT_ROW_FUNCTIONS(SUFFIX, ATTR)                                                           \
  ATTR void SoftmaxRowStep##SUFFIX(float* s, int64_t n, int64_t visible, float* max, float* sum, \
                                   float* acc, int64_t dim) {                                    \
    SoftmaxRowStepBody(s, n, visible, max, sum, acc, dim);                                       \
  }                                                                                              \
  ATTR void ProbabilityRow##SUFFIX(float* s, int64_t n, int64_t visible, float lse) {            \
    ProbabilityRowBody(s, n, visible, lse);                                                      \
  }                                                                                              \
  ATTR void ScoreGradRow##SUFFIX(float* dp, const float* p, int64_t n, float delta) {            \
    ScoreGradRowBody(dp, p, n, delta);                                                           \
  }                                                                                              \
  ATTR void ScaleRow##SUFFIX(float* x, int64_t n, float a) { ScaleRowBody(x, n, a); }            \
  ATTR void VecExp##SUFFIX(const float* x, float* y, int64_t n) { VecExpBody(x, y, n); }

RT_ROW_FUNCTIONS(Baseline, )
#if defined(__x86_64__)
RT_ROW_FUNCTIONS(Avx2, __attribute__((target("avx2,fma"))))
#endif

RowFunctions Choose() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return {SoftmaxRowStepAvx2, ProbabilityRowAvx2, ScoreGradRowAvx2,
            ScaleRowAvx2,       VecExpAvx2,         "avx2+fma"};
  }
#endif
  return {SoftmaxRowStepBaseline, ProbabilityRowBaseline, ScoreGradRowBaseline,
          ScaleRowBaseline,       VecExpBaseline,         "sse2"};
}

const RowFunctions& Rows() {
  static const RowFunctions functions = Choose();
  return functions;
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
const char* AttentionRowsIsa() { return Rows().isa; }

}  // namespace ringtrain
