// The model's bias-free projections x · Wᵀ (llama.cc's Project) on the BRGeMM GEMM
// (kernels/brgemm_matmul.h), all three GEMMs, as an autograd function, where that engine is the
// float32 one (cpu_isa.h's ActiveF32Gemm(): AVX-512 CPUs that are not Intel's, where MKL runs
// AVX2):
//
//   forward   y  = x · Wᵀ   Wᵀ transposed once per call (a weight: small)
//   backward  dx = dy · W
//             dW = dyᵀ · x  BrgemmMatmulTransposedA: dy's pieces transposed inside the GEMM
//                           (BRGeMM takes no transposed operand)
//
// Bitwise repeatable and independent of the thread count; agrees with at::linear to float32
// rounding (the sums run in another order).
//
// B batch, L local sequence length, C in features, O out features.
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_BRGEMM_LINEAR_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_BRGEMM_LINEAR_H_

#include <ATen/Tensor.h>

namespace ringtrain {

// Whether BrgemmLinear runs x · Wᵀ here: the float32 GEMM engine is BRGeMM, and x (…, C) and
// weight (O, C) are float32 CPU tensors.
bool BrgemmLinearApplies(const at::Tensor& x, const at::Tensor& weight);

// x (…, C) · weightᵀ → (…, O), with its gradients for x and weight.
at::Tensor BrgemmLinear(const at::Tensor& x, const at::Tensor& weight);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_BRGEMM_LINEAR_H_
