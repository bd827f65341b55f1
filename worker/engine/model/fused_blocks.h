// The fused element-wise blocks of the Llama step on the CPU, as autograd functions: RMSNorm (and
// its weight gradient), RoPE on Q and K in one pass (also doing the (B, L, heads, D) → (B, heads,
// L, D) transpose the attention kernels want), and SwiGLU. Each reads and writes its activations
// once a pass instead of once an ATen op, threads over rows (at::parallel_for) and runs the row
// code of kernels/fused_rows.h at the CPU's level (kernels/cpu_isa.h). Results agree with the ATen
// chains in llama.cc / rope.cc to float rounding (not bitwise: the reductions add in another
// order) and are bitwise repeatable for any thread count (the weight gradient sums fixed blocks
// of rows in a fixed order).
//
// Activations float32 or bfloat16 on the CPU (FusedBlocksApply); everything else (CUDA, float64)
// keeps the ATen chains, chosen once per model (TransformerImpl::SetFusedBlocks).
//
// B batch, L local sequence length, C model dim, H / Hk query / kv heads, D head dim, F FFN width.
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_FUSED_BLOCKS_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_FUSED_BLOCKS_H_

#include <utility>

#include <ATen/Tensor.h>

namespace ringtrain {

// Whether the fused blocks can run on activations like `x`: CPU, float32 or bfloat16.
bool FusedBlocksApply(const at::Tensor& x);

// RMSNorm in float32 statistics: x (…, C) float32 or bfloat16, weight (C,) (any float dtype; its
// gradient comes back in its dtype) → (…, C) in x's dtype.
at::Tensor FusedRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// RoPE (rope.h's interleaved pairs) on q (B, L, H, D) and k (B, L, Hk, D) at `positions` (L,)
// int64, from the tables `cos`, `sin` (max_seq_len, D/2) float32 → q (B, H, L, D), k (B, Hk, L,
// D), contiguous, in the inputs' dtype.
std::pair<at::Tensor, at::Tensor> FusedRopeQK(const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& cos, const at::Tensor& sin,
                                              const at::Tensor& positions);

// silu(a) · b for a, b of one shape (…, F).
at::Tensor FusedSwiGlu(const at::Tensor& a, const at::Tensor& b);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_FUSED_BLOCKS_H_
