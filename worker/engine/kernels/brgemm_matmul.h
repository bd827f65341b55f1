// A float32 GEMM of whole activations on oneDNN's BRGeMM micro-kernel (inside LibTorch), for the
// CPUs where it beats MKL's sgemm: AVX-512 CPUs that are not Intel's, where MKL runs AVX2
// (cpu_isa.h's F32Gemm). The model's projections take it there (model/brgemm_linear.h).
//
// C is cut into blocks of 128 rows (64 where 128 would leave a thread idle) × 256 columns, spread
// over LibTorch's intra-op threads; each block is summed over K in chunks of 256, in order, by one
// thread, and the micro-kernel sums each element over its chunk in order whatever the block's
// shape. So the result is bitwise the same on every run and for every thread count; it differs
// from MKL's in the order of the sums (a few ulp).
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_BRGEMM_MATMUL_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_BRGEMM_MATMUL_H_

#include <cstdint>

namespace ringtrain {

// Row-major C (m × n, leading dim ldc) = A (m × k, lda) · B (k × n, ldb), neither transposed;
// C += A · B with `accumulate`. Needs AVX-512 (AvailableF32Gemms() holds kBrgemm). k 0 gives a
// zero product.
void BrgemmMatmul(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float* c, int64_t ldc, bool accumulate = false);

// The same with A given as its transpose: a_t is k × m (row-major, leading dim lda_t), as for a
// weight gradient dW = dyᵀ · x whose dy is (rows, out). Each thread transposes the pieces of A
// its blocks take (up to 128 × 256), just before their GEMM, rather than the whole of A beforehand
// on one thread; the sums are those of BrgemmMatmul on the transposed A, bit for bit.
void BrgemmMatmulTransposedA(int64_t m, int64_t n, int64_t k, const float* a_t, int64_t lda_t,
                             const float* b, int64_t ldb, float* c, int64_t ldc,
                             bool accumulate = false);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_BRGEMM_MATMUL_H_
