#include "worker/engine/kernels/fused_rows.h"

#include <cmath>
#include <cstring>

#include "worker/engine/kernels/cpu_isa.h"
#include "worker/engine/kernels/simd.h"

namespace ringtrain {
namespace {

using simd::Mask;
using simd::Vec;

// ---- loads and stores of float32 or bfloat16 activations ----

// The first n (<= N) elements of p as floats, 0 past them.
template <int N, typename T>
RT_INLINE Vec<N> LoadTail(const T* p, int64_t n) {
  T buffer[N] = {};
  std::memcpy(buffer, p, size_t(n) * sizeof(T));
  return simd::LoadAs<N>(buffer);
}

// v rounded to bfloat16 (to nearest even; NaN kept), as floats.
template <int N>
RT_INLINE Vec<N> RoundBf16(Vec<N> v) {
  const simd::Bits<N> bits = reinterpret_cast<simd::Bits<N>>(v);
  const simd::Bits<N> rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  return simd::Select<N>(v != v, v, reinterpret_cast<Vec<N>>(rounded));
}

// v into N elements of T (bfloat16: rounded to nearest even by simd::NarrowToBf16; H: with
// VCVTNEPS2BF16).
template <int N, bool H, typename T>
RT_INLINE void StoreTo(T* p, Vec<N> v) {
  if constexpr (sizeof(T) == sizeof(float)) {
    simd::Store<N>(reinterpret_cast<float*>(p), v);
  } else {
    simd::StoreBf16<N, H>(p, v);
  }
}
template <int N, bool H, typename T>
RT_INLINE void StoreTail(T* p, Vec<N> v, int64_t n) {
  T buffer[N];
  StoreTo<N, H>(buffer, v);
  std::memcpy(p, buffer, size_t(n) * sizeof(T));
}

// ---- the bodies, compiled once per level below ----

template <int N, bool H, typename T>
RT_INLINE float RmsNormRowBody(const T* x, const float* w, T* y, int64_t c, float eps) {
  constexpr bool kBf16 = sizeof(T) != sizeof(float);
  Vec<N> squares = simd::Splat<N>(0.0f);
  int64_t j = 0;
  for (; j + N <= c; j += N) {
    const Vec<N> v = simd::LoadAs<N>(x + j);
    squares += v * v;
  }
  if (j < c) {
    const Vec<N> v = LoadTail<N>(x + j, c - j);
    squares += v * v;
  }
  const float rstd = 1.0f / std::sqrt(simd::HorizontalSum<N>(squares) / float(c) + eps);
  const Vec<N> r = simd::Splat<N>(rstd);
  auto normed = [&](Vec<N> v, Vec<N> weight) {
    if constexpr (kBf16) return RoundBf16<N>(v * r) * RoundBf16<N>(weight);
    return (v * r) * weight;
  };
  for (j = 0; j + N <= c; j += N) {
    StoreTo<N, H>(y + j, normed(simd::LoadAs<N>(x + j), simd::Load<N>(w + j)));
  }
  if (j < c) {
    StoreTail<N, H>(y + j, normed(LoadTail<N>(x + j, c - j), LoadTail<N>(w + j, c - j)), c - j);
  }
  return rstd;
}

template <int N, bool H, typename T>
RT_INLINE void RmsNormGradRowBody(const T* dy, const T* x, const float* w, float rstd, T* dx,
                                  float* dw_acc, int64_t c) {
  constexpr bool kBf16 = sizeof(T) != sizeof(float);
  const Vec<N> r = simd::Splat<N>(rstd);
  // g = dy·w (the gradient of the normed row), and Σ g·x̂ for the projection out of it.
  Vec<N> dot = simd::Splat<N>(0.0f);
  auto step = [&](Vec<N> vdy, Vec<N> vx, Vec<N> vw, Vec<N>* dw) {
    const Vec<N> xhat = vx * r;
    const Vec<N> weight = kBf16 ? RoundBf16<N>(vw) : vw;
    const Vec<N> normed = kBf16 ? RoundBf16<N>(xhat) : xhat;
    *dw += vdy * normed;
    dot += (vdy * weight) * xhat;
  };
  int64_t j = 0;
  for (; j + N <= c; j += N) {
    Vec<N> dw = simd::Load<N>(dw_acc + j);
    step(simd::LoadAs<N>(dy + j), simd::LoadAs<N>(x + j), simd::Load<N>(w + j), &dw);
    simd::Store<N>(dw_acc + j, dw);
  }
  if (j < c) {
    Vec<N> dw = LoadTail<N>(dw_acc + j, c - j);
    step(LoadTail<N>(dy + j, c - j), LoadTail<N>(x + j, c - j), LoadTail<N>(w + j, c - j), &dw);
    StoreTail<N, H>(dw_acc + j, dw, c - j);
  }
  const Vec<N> mean = simd::Splat<N>(simd::HorizontalSum<N>(dot) / float(c));
  // dx = rstd·(g − x̂·mean(g·x̂))
  auto grad = [&](Vec<N> vdy, Vec<N> vx, Vec<N> vw) {
    const Vec<N> weight = kBf16 ? RoundBf16<N>(vw) : vw;
    return r * (vdy * weight - (vx * r) * mean);
  };
  for (j = 0; j + N <= c; j += N) {
    StoreTo<N, H>(dx + j,
                  grad(simd::LoadAs<N>(dy + j), simd::LoadAs<N>(x + j), simd::Load<N>(w + j)));
  }
  if (j < c) {
    StoreTail<N, H>(
        dx + j,
        grad(LoadTail<N>(dy + j, c - j), LoadTail<N>(x + j, c - j), LoadTail<N>(w + j, c - j)),
        c - j);
  }
}

// Lanes (0 1)(2 3)… swapped within each pair.
template <int N>
RT_INLINE Vec<N> SwapPairs(Vec<N> v) {
  Mask<N> swap;
  for (int i = 0; i < N; ++i) swap[i] = i ^ 1;
  return __builtin_shuffle(v, swap);
}

template <int N, bool H, typename T>
RT_INLINE void RotateHeadsBody(const T* in, int64_t in_stride, T* out, int64_t out_stride,
                               int64_t heads, int64_t d, const float* cos2, const float* sin2) {
  for (int64_t h = 0; h < heads; ++h) {
    const T* src = in + h * in_stride;
    T* dst = out + h * out_stride;
    int64_t j = 0;
    for (; j + N <= d; j += N) {
      const Vec<N> v = simd::LoadAs<N>(src + j);
      StoreTo<N, H>(dst + j,
                    v * simd::Load<N>(cos2 + j) + SwapPairs<N>(v) * simd::Load<N>(sin2 + j));
    }
    if (j < d) {
      const Vec<N> v = LoadTail<N>(src + j, d - j);
      StoreTail<N, H>(
          dst + j,
          v * LoadTail<N>(cos2 + j, d - j) + SwapPairs<N>(v) * LoadTail<N>(sin2 + j, d - j), d - j);
    }
  }
}

// sigmoid(a), with exp's argument capped at 80 so that 1 / (1 + exp) stays a normal number.
template <int N>
RT_INLINE Vec<N> Sigmoid(Vec<N> a) {
  Vec<N> minus = -a;
  minus = simd::Select<N>(minus > simd::Splat<N>(80.0f), simd::Splat<N>(80.0f), minus);
  return simd::Splat<N>(1.0f) / (simd::Splat<N>(1.0f) + simd::Exp<N>(minus));
}

template <int N, bool H, typename T>
RT_INLINE void SwiGluRowBody(const T* a, const T* b, T* h, int64_t n) {
  auto body = [](Vec<N> va, Vec<N> vb) { return (va * Sigmoid<N>(va)) * vb; };
  int64_t j = 0;
  for (; j + N <= n; j += N)
    StoreTo<N, H>(h + j, body(simd::LoadAs<N>(a + j), simd::LoadAs<N>(b + j)));
  if (j < n)
    StoreTail<N, H>(h + j, body(LoadTail<N>(a + j, n - j), LoadTail<N>(b + j, n - j)), n - j);
}

template <int N, bool H, typename T>
RT_INLINE void SwiGluGradRowBody(const T* dh, const T* a, const T* b, T* da, T* db, int64_t n) {
  auto body = [](Vec<N> vdh, Vec<N> va, Vec<N> vb, Vec<N>* vda, Vec<N>* vdb) {
    const Vec<N> s = Sigmoid<N>(va);
    *vdb = vdh * (va * s);
    *vda = (vdh * vb) * (s * (simd::Splat<N>(1.0f) + va * (simd::Splat<N>(1.0f) - s)));
  };
  int64_t j = 0;
  Vec<N> vda, vdb;
  for (; j + N <= n; j += N) {
    body(simd::LoadAs<N>(dh + j), simd::LoadAs<N>(a + j), simd::LoadAs<N>(b + j), &vda, &vdb);
    StoreTo<N, H>(da + j, vda);
    StoreTo<N, H>(db + j, vdb);
  }
  if (j < n) {
    body(LoadTail<N>(dh + j, n - j), LoadTail<N>(a + j, n - j), LoadTail<N>(b + j, n - j), &vda,
         &vdb);
    StoreTail<N, H>(da + j, vda, n - j);
    StoreTail<N, H>(db + j, vdb, n - j);
  }
}

template <typename T>
struct RowTable {
  float (*rms_norm)(const T*, const float*, T*, int64_t, float);
  void (*rms_norm_grad)(const T*, const T*, const float*, float, T*, float*, int64_t);
  void (*rotate)(const T*, int64_t, T*, int64_t, int64_t, int64_t, const float*, const float*);
  void (*swiglu)(const T*, const T*, T*, int64_t);
  void (*swiglu_grad)(const T*, const T*, const T*, T*, T*, int64_t);
};

#define RT_FUSED_ROWS(SUFFIX, N, H, ATTR)                                                         \
  template <typename T>                                                                           \
  ATTR float RmsNorm##SUFFIX(const T* x, const float* w, T* y, int64_t c, float eps) {            \
    return RmsNormRowBody<N, H>(x, w, y, c, eps);                                                 \
  }                                                                                               \
  template <typename T>                                                                           \
  ATTR void RmsNormGrad##SUFFIX(const T* dy, const T* x, const float* w, float rstd, T* dx,       \
                                float* dw, int64_t c) {                                           \
    RmsNormGradRowBody<N, H>(dy, x, w, rstd, dx, dw, c);                                          \
  }                                                                                               \
  template <typename T>                                                                           \
  ATTR void Rotate##SUFFIX(const T* in, int64_t is, T* out, int64_t os, int64_t heads, int64_t d, \
                           const float* cos2, const float* sin2) {                                \
    RotateHeadsBody<N, H>(in, is, out, os, heads, d, cos2, sin2);                                 \
  }                                                                                               \
  template <typename T>                                                                           \
  ATTR void SwiGlu##SUFFIX(const T* a, const T* b, T* h, int64_t n) {                             \
    SwiGluRowBody<N, H>(a, b, h, n);                                                              \
  }                                                                                               \
  template <typename T>                                                                           \
  ATTR void SwiGluGrad##SUFFIX(const T* dh, const T* a, const T* b, T* da, T* db, int64_t n) {    \
    SwiGluGradRowBody<N, H>(dh, a, b, da, db, n);                                                 \
  }                                                                                               \
  template <typename T>                                                                           \
  constexpr RowTable<T> k##SUFFIX = {RmsNorm##SUFFIX<T>, RmsNormGrad##SUFFIX<T>,                  \
                                     Rotate##SUFFIX<T>, SwiGlu##SUFFIX<T>, SwiGluGrad##SUFFIX<T>};

RT_FUSED_ROWS(Baseline, 8, false, )
#if defined(__x86_64__)
RT_FUSED_ROWS(Avx2, 8, false, __attribute__((target("avx2,fma"))))
RT_FUSED_ROWS(Avx512, 16, false,
              __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))))
RT_FUSED_ROWS(Avx512Bf16, 16, true,
              __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))))
#endif

// Indexed by CpuIsa; the levels a build for another architecture lacks run the baseline.
template <typename T>
const RowTable<T>& Rows() {
#if defined(__x86_64__)
  static constexpr RowTable<T> kRows[kCpuIsaCount] = {kBaseline<T>, kAvx2<T>, kAvx512<T>,
                                                      kAvx512Bf16<T>};
#else
  static constexpr RowTable<T> kRows[kCpuIsaCount] = {kBaseline<T>, kBaseline<T>, kBaseline<T>,
                                                      kBaseline<T>};
#endif
  return kRows[static_cast<int>(ActiveCpuIsa())];
}

}  // namespace

template <typename T>
float RmsNormRow(const T* x, const float* w, T* y, int64_t c, float eps) {
  return Rows<T>().rms_norm(x, w, y, c, eps);
}
template <typename T>
void RmsNormGradRow(const T* dy, const T* x, const float* w, float rstd, T* dx, float* dw_acc,
                    int64_t c) {
  Rows<T>().rms_norm_grad(dy, x, w, rstd, dx, dw_acc, c);
}
template <typename T>
void RotateHeads(const T* in, int64_t in_stride, T* out, int64_t out_stride, int64_t heads,
                 int64_t d, const float* cos2, const float* sin2) {
  Rows<T>().rotate(in, in_stride, out, out_stride, heads, d, cos2, sin2);
}
template <typename T>
void SwiGluRow(const T* a, const T* b, T* h, int64_t n) {
  Rows<T>().swiglu(a, b, h, n);
}
template <typename T>
void SwiGluGradRow(const T* dh, const T* a, const T* b, T* da, T* db, int64_t n) {
  Rows<T>().swiglu_grad(dh, a, b, da, db, n);
}

#define RT_INSTANTIATE(T)                                                                        \
  template float RmsNormRow<T>(const T*, const float*, T*, int64_t, float);                      \
  template void RmsNormGradRow<T>(const T*, const T*, const float*, float, T*, float*, int64_t); \
  template void RotateHeads<T>(const T*, int64_t, T*, int64_t, int64_t, int64_t, const float*,   \
                               const float*);                                                    \
  template void SwiGluRow<T>(const T*, const T*, T*, int64_t);                                   \
  template void SwiGluGradRow<T>(const T*, const T*, const T*, T*, T*, int64_t);
RT_INSTANTIATE(float)
RT_INSTANTIATE(uint16_t)

}  // namespace ringtrain
