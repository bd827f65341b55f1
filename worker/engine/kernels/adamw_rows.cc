#include "worker/engine/kernels/adamw_rows.h"

#include <cmath>

#include "worker/engine/kernels/cpu_isa.h"

namespace ringtrain {
namespace {

// The loop GCC vectorises (this file is compiled with -O3 -ffp-contract=off -fno-math-errno: sqrt
// becomes the vector square root, correctly rounded, and no multiply-add is fused) once per level.
template <bool kCopy>
inline __attribute__((always_inline)) void Body(float* __restrict p, const float* __restrict g,
                                                float* __restrict m, float* __restrict v, int64_t n,
                                                const AdamWScalars& s, float* __restrict cp,
                                                float* __restrict cm, float* __restrict cv) {
  const float decay = s.decay, beta1 = s.beta1, a1 = s.one_minus_beta1, beta2 = s.beta2,
              a2 = s.one_minus_beta2, bc2 = s.bias_correction2_sqrt, eps = s.eps,
              step = s.neg_step_size;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = m[i] * beta1 + a1 * gi;
    const float vi = v[i] * beta2 + (a2 * gi) * gi;
    const float pi = p[i] * decay + (step * mi) / (std::sqrt(vi) / bc2 + eps);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if constexpr (kCopy) {
      cp[i] = pi;
      cm[i] = mi;
      cv[i] = vi;
    }
  }
}

using UpdateFn = void (*)(float*, const float*, float*, float*, int64_t, const AdamWScalars&,
                          const AdamWCopies&);

#define RT_ADAMW_LEVEL(SUFFIX, ATTR)                                                \
  ATTR void Update##SUFFIX(float* p, const float* g, float* m, float* v, int64_t n, \
                           const AdamWScalars& s, const AdamWCopies& c) {           \
    if (c.p != nullptr) {                                                           \
      Body<true>(p, g, m, v, n, s, c.p, c.m, c.v);                                  \
    } else {                                                                        \
      Body<false>(p, g, m, v, n, s, nullptr, nullptr, nullptr);                     \
    }                                                                               \
  }

RT_ADAMW_LEVEL(Baseline, )
#if defined(__x86_64__)
RT_ADAMW_LEVEL(Avx2, __attribute__((target("avx2,fma"))))
RT_ADAMW_LEVEL(Avx512, __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))))
#endif

// The level's loop (avx512_bf16 runs avx512's: nothing here rounds to bfloat16).
UpdateFn Level() {
  switch (ActiveCpuIsa()) {
#if defined(__x86_64__)
    case CpuIsa::kAvx2: return UpdateAvx2;
    case CpuIsa::kAvx512:
    case CpuIsa::kAvx512Bf16: return UpdateAvx512;
#endif
    default: return UpdateBaseline;
  }
}

}  // namespace

void AdamWUpdate(float* p, const float* g, float* m, float* v, int64_t n, const AdamWScalars& s,
                 const AdamWCopies& copies) {
  Level()(p, g, m, v, n, s, copies);
}

}  // namespace ringtrain
