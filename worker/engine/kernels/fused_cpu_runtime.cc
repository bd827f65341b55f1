#include "worker/engine/kernels/fused_cpu_runtime.h"

#include "worker/engine/kernels/denormals.h"

#include <algorithm>
#include <cstdint>

#include <ATen/native/CPUBlas.h>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

// Fortran BLAS single-precision GEMM (column-major). The pinned LibTorch's CPU library carries MKL
// and exports it (the link fails on a LibTorch without it).
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);
// MKL's CBLAS bfloat16 GEMM with float32 C (MKL_BF16 is the 16 bits; MKL_INT is int in LibTorch's
// LP64 MKL); the layout and transpose arguments are CBLAS's enum values.
extern "C" void cblas_gemm_bf16bf16f32(int layout, int transa, int transb, int m, int n, int k,
                                       float alpha, const uint16_t* a, int lda, const uint16_t* b,
                                       int ldb, float beta, float* c, int ldc);
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;
// MKL's per-thread thread count (returns the previous one; 0 = the global setting).
extern "C" int MKL_Set_Num_Threads_Local(int threads);  // mkl_set_num_threads_local in C

namespace ringtrain {
namespace fused_cpu_internal {

// Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ, and a row-major matrix read column-major is its
// transpose: so B and A swap places and keep their flags.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int im = int(m), in = int(n), ik = int(k), ilda = int(lda), ildb = int(ldb),
            ildc = int(ldc);
  const float one = 1.0f;
  sgemm_(&tb, &ta, &in, &im, &ik, &one, b, &ildb, a, &ilda, &beta, c, &ildc);
}

void GemmBrgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  at::native::cpublas::brgemm(m, n, k, lda, ldb, ldc, accumulate, a, b, c, /*is_vnni=*/false);
}

void GemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
              int64_t ldc) {
  cblas_gemm_bf16bf16f32(kCblasRowMajor, trans_a ? kCblasTrans : kCblasNoTrans,
                         trans_b ? kCblasTrans : kCblasNoTrans, int(m), int(n), int(k), alpha, a,
                         int(lda), b, int(ldb), beta, c, int(ldc));
}

SequentialBlas::SequentialBlas() : saved_(MKL_Set_Num_Threads_Local(1)) {}
SequentialBlas::~SequentialBlas() { MKL_Set_Num_Threads_Local(saved_); }

#if defined(__x86_64__)
DenormalsAreZero::DenormalsAreZero() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040); }
DenormalsAreZero::~DenormalsAreZero() { _mm_setcsr(saved_); }
#else
DenormalsAreZero::DenormalsAreZero() = default;
DenormalsAreZero::~DenormalsAreZero() = default;
#endif

int64_t PartsFor(int64_t items) {
  return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), items));
}

}  // namespace fused_cpu_internal

void FlushDenormalsOnComputeThreads() {
#if defined(__x86_64__)
  _mm_setcsr(_mm_getcsr() | 0x8040);
  const int64_t threads = at::get_num_threads();
  at::parallel_for(0, threads, 1, [](int64_t, int64_t) { _mm_setcsr(_mm_getcsr() | 0x8040); });
#endif
}

}  // namespace ringtrain
