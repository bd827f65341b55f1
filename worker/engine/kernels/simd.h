// Float vectors of N lanes for the CPU kernels' row code (attention_rows.cc, fused_rows.cc), as
// GCC vector extensions: a body written once over Vec<N> is compiled per level (cpu_isa.h) inside
// functions with __attribute__((target(...))): N 8 is one AVX register (two SSE registers at the
// baseline), N 16 one AVX-512 register. Include only from those .cc files: the helpers are always
// inlined into their per-level callers. Torch-free.
//
// Exp: x = n·ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^n by VSCALEFPS or the
// exponent bits; relative error within 2 ulp of std::exp over the range that matters. Results
// below 2^-126 (x < −87, and −inf) are exactly 0: no denormal is produced.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_SIMD_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_SIMD_H_

#include <cstdint>
#include <cstring>
#include <limits>

// The vectors live in registers inside always-inline helpers; GCC's note that passing them by
// value would change the ABI without AVX does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace ringtrain::simd {

#define RT_INLINE inline __attribute__((always_inline))

// (GCC applies a vector_size that depends on N only to typedefs at class scope: one inside a
// function template silently declares a scalar.)
template <int N>
struct Types {
  typedef float F __attribute__((vector_size(N * sizeof(float))));
  typedef int32_t I __attribute__((vector_size(N * sizeof(float))));
  typedef uint32_t U __attribute__((vector_size(N * sizeof(float))));
  typedef uint16_t H __attribute__((vector_size(N * sizeof(uint16_t))));
};
template <int N>
using Vec = typename Types<N>::F;
template <int N>
using Mask = typename Types<N>::I;
template <int N>
using Bits = typename Types<N>::U;
template <int N>
using Halves = typename Types<N>::H;

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <int N>
RT_INLINE Vec<N> Splat(float x) {
  return Vec<N>{} + x;
}
template <int N>
RT_INLINE Vec<N> Load(const float* p) {
  Vec<N> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <int N>
RT_INLINE void Store(float* p, Vec<N> v) {
  std::memcpy(p, &v, sizeof v);
}
// The first n (< N) lanes from p, the others `fill`.
template <int N>
RT_INLINE Vec<N> LoadPartial(const float* p, int64_t n, float fill) {
  Vec<N> v = Splat<N>(fill);
  std::memcpy(&v, p, size_t(n) * sizeof(float));
  return v;
}
template <int N>
RT_INLINE void StorePartial(float* p, Vec<N> v, int64_t n) {
  std::memcpy(p, &v, size_t(n) * sizeof(float));
}
template <int N>
RT_INLINE Vec<N> Select(Mask<N> mask, Vec<N> a, Vec<N> b) {
  return reinterpret_cast<Vec<N>>((reinterpret_cast<Mask<N>>(a) & mask) |
                                  (reinterpret_cast<Mask<N>>(b) & ~mask));
}
template <int N>
RT_INLINE Vec<N> Max(Vec<N> a, Vec<N> b) {
  return a > b ? a : b;  // MAXPS exactly (b where they compare equal or either is NaN)
}
// The low and high halves of v, as vectors of N/2 lanes (one extract each, not N scalar moves).
template <int N>
RT_INLINE Vec<N / 2> LowHalf(Vec<N> v) {
  Vec<N / 2> h;
  std::memcpy(&h, &v, sizeof h);
  return h;
}
template <int N>
RT_INLINE Vec<N / 2> HighHalf(Vec<N> v) {
  Vec<N / 2> h;
  std::memcpy(&h, reinterpret_cast<const char*>(&v) + sizeof h, sizeof h);
  return h;
}
// The reductions halve in vector registers until two lanes are left.
template <int N>
RT_INLINE float HorizontalMax(Vec<N> v) {
  if constexpr (N == 2) {
    return v[1] > v[0] ? v[1] : v[0];
  } else {
    return HorizontalMax<N / 2>(Max<N / 2>(LowHalf<N>(v), HighHalf<N>(v)));
  }
}
// Pairwise, in a fixed order: lanes i and i + N/2 first, halving until one is left.
template <int N>
RT_INLINE float HorizontalSum(Vec<N> v) {
  if constexpr (N == 2) {
    return v[0] + v[1];
  } else {
    return HorizontalSum<N / 2>(LowHalf<N>(v) + HighHalf<N>(v));
  }
}

// p · 2^n for integral n (as floats) where the result is a normal float: on 16 lanes (AVX-512) by
// VSCALEFPS, one instruction; otherwise through the exponent bits. Inline assembly for the same
// reason as NarrowToBf16Instruction: only the avx512 levels' functions hold 16-lane vectors.
template <int N>
RT_INLINE Vec<N> ScaleByPowerOfTwo(Vec<N> p, Vec<N> n) {
  if constexpr (N == 16) {
    Vec<N> scaled;
    asm("vscalefps %2, %1, %0" : "=v"(scaled) : "v"(p), "v"(n));
    return scaled;
  } else {
    const Mask<N> bits = (__builtin_convertvector(n, Mask<N>) + 127) << 23;
    return p * reinterpret_cast<Vec<N>>(bits);
  }
}

template <int N>
RT_INLINE Vec<N> Exp(Vec<N> x) {
  const Mask<N> underflow = x < Splat<N>(-87.0f);  // also −inf (and NaN compares false: stays NaN)
  x = Select<N>(x > Splat<N>(88.0f), Splat<N>(88.0f), x);  // exp(88) < FLT_MAX
  // (VSCALEFPS takes the lanes that underflow, −inf included, without harm: they are zeroed below.)
  if constexpr (N != 16) x = Select<N>(underflow, Splat<N>(0.0f), x);
  // n = round(x / ln2) by the 1.5·2^23 trick, exact for |x / ln2| < 2^22.
  const Vec<N> magic = Splat<N>(12582912.0f);
  const Vec<N> fn = (x * Splat<N>(1.44269504088896341f) + magic) - magic;
  // r = x − n·ln2 in two parts (Cody–Waite).
  Vec<N> r = x - fn * Splat<N>(0.693359375f);
  r = r - fn * Splat<N>(-2.12194440e-4f);
  // exp(r) by Horner's rule on a degree-6 polynomial fitted for relative error on |r| <= ln2/2
  // (1.9e-9 in exact arithmetic; under 1.5 ulp in float with FMAs, as accurate as the degree-7
  // Cephes polynomial it replaced, with two operations fewer).
  Vec<N> p = Splat<N>(1.383684576e-3f);
  p = p * r + Splat<N>(8.374815807e-3f);
  p = p * r + Splat<N>(4.166822508e-2f);
  p = p * r + Splat<N>(1.666641980e-1f);
  p = p * r + Splat<N>(4.999999106e-1f);
  p = p * r + Splat<N>(1.0f);
  p = p * r + Splat<N>(1.0f);
  return Select<N>(underflow, Splat<N>(0.0f), ScaleByPowerOfTwo<N>(p, fn));
}

// bfloat16 as its 16 bits: widening is exact; narrowing rounds to nearest even (NaN stays NaN),
// as PyTorch's float → bfloat16 does.
RT_INLINE float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
RT_INLINE uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// VCVTNEPS2BF16 (AVX512-BF16) on 16 lanes: round to nearest even, NaN made quiet, and — unlike
// FloatToBf16 — denormal inputs taken as 0. Inline assembly, so only the functions of the
// avx512_bf16 level (cpu_isa.h), which the CPU is known to run, ever contain it.
template <int N>
RT_INLINE Halves<N> NarrowToBf16Instruction(Vec<N> v) {
  static_assert(N == 16, "VCVTNEPS2BF16 narrows one 16-lane AVX-512 register");
  Halves<N> h;
  asm("vcvtneps2bf16 %1, %0" : "=v"(h) : "v"(v));
  return h;
}

// FloatToBf16 on N lanes at once: the same bits; with kInstruction (the avx512_bf16 level) by
// VCVTNEPS2BF16, the same bits but for denormal inputs (0).
template <int N, bool kInstruction = false>
RT_INLINE Halves<N> NarrowToBf16(Vec<N> v) {
  if constexpr (kInstruction) {
    return NarrowToBf16Instruction<N>(v);
  } else {
    const Bits<N> bits = reinterpret_cast<Bits<N>>(v);
    const Bits<N> rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const Bits<N> quiet_nan = (bits >> 16) | 0x40u;
    const Bits<N> is_nan = reinterpret_cast<Bits<N>>((bits & 0x7fffffffu) > 0x7f800000u);
    return __builtin_convertvector((quiet_nan & is_nan) | (rounded & ~is_nan), Halves<N>);
  }
}

// v into N bfloat16s at p, rounded by NarrowToBf16; and its first n (< N) lanes only.
template <int N, bool kInstruction = false>
RT_INLINE void StoreBf16(uint16_t* p, Vec<N> v) {
  const Halves<N> h = NarrowToBf16<N, kInstruction>(v);
  std::memcpy(p, &h, sizeof h);
}
template <int N, bool kInstruction = false>
RT_INLINE void StorePartialBf16(uint16_t* p, Vec<N> v, int64_t n) {
  const Halves<N> h = NarrowToBf16<N, kInstruction>(v);
  std::memcpy(p, &h, size_t(n) * sizeof(uint16_t));
}

// N elements of T (float or bfloat16 bits) as floats, and back.
template <int N, typename T>
RT_INLINE Vec<N> LoadAs(const T* p) {
  if constexpr (sizeof(T) == sizeof(float)) {
    return Load<N>(reinterpret_cast<const float*>(p));
  } else {
    Halves<N> u;
    std::memcpy(&u, p, sizeof u);
    const Mask<N> wide = __builtin_convertvector(u, Mask<N>) << 16;
    return reinterpret_cast<Vec<N>>(wide);
  }
}
template <int N, typename T>
RT_INLINE void StoreAs(T* p, Vec<N> v) {
  if constexpr (sizeof(T) == sizeof(float)) {
    Store<N>(reinterpret_cast<float*>(p), v);
  } else {
    StoreBf16<N>(p, v);
  }
}
template <typename T>
RT_INLINE float ScalarAs(T x) {
  if constexpr (sizeof(T) == sizeof(float)) {
    return x;
  } else {
    return Bf16ToFloat(x);
  }
}
template <typename T>
RT_INLINE T FromFloat(float x) {
  if constexpr (sizeof(T) == sizeof(float)) {
    return x;
  } else {
    return FloatToBf16(x);
  }
}

}  // namespace ringtrain::simd

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_SIMD_H_
