// ringtrain's fused CPU attention block kernel (training.attention_kernel = "cpu_flash", formerly
// "ringtrain"; the CPU default): one pass over (query tile × key tile) pairs in float32 where the
// score tile never leaves the cache —
//
//   S = (scale·Q) Kᵀ   one GEMM into a preallocated tile (the MKL or oneDNN BRGeMM inside
//                      LibTorch: cpu_isa.h's F32Gemm)
//   online softmax     vectorised max / exp / sum on S in place (kernels/vec_exp.h), the causal
//                      mask by index arithmetic: a key tile wholly visible to a query tile is
//                      "full", one wholly hidden is skipped, and in a "partial" one each row sees
//                      a prefix of the tile's (ascending) positions
//   O += P V           one GEMM accumulating into the row block
//
// and the FlashAttention-2 backward (recompute P from the final log-sum-exp, dV += Pᵀ dO,
// dS = P ∘ (dO Vᵀ − delta), dQ += dS K, dK += dSᵀ Q: five GEMMs per tile pair).
//
// GQA without expanding K/V: the G query heads of one kv head are stacked as the G·Tq rows of one
// row block, so each K/V tile is read once for all of them. Tiles are sized from the head dim for
// a 512 KiB L2; lengths with no good divisor get ragged last tiles, never tiny ones.
//
// Threads: the work items are (batch, kv head, query tile), in that order; they are cut into one
// contiguous range per intra-op thread with equal causal cost (scores computed), in forward and
// backward alike. In backward each range accumulates dK/dV in its own buffer and the buffers are
// summed in range order, so the result depends on the thread count only — never on timing.
// Every thread computes with flush-to-zero and denormals-are-zero set (restored afterwards), so a
// softmax that grows peaky never runs into slow denormal arithmetic.
//
// bfloat16 inputs are multiplied as bfloat16 with float32 accumulation on Intel CPUs with bf16
// matrix units (AMX, AVX512-BF16; cpu_isa.h's Bf16Gemm, RINGTRAIN_BF16_GEMM): scores, dP and the
// softmax statistics stay float32, the probabilities P and score gradients dS are rounded to
// bfloat16 for the GEMMs that take them (as FlashAttention does); out, lse and the gradients are
// float32. Elsewhere they are widened to float32. float64 (tests) runs the tiled kernel.
//
// The parts: fused_cpu_plan.h (tiles, masks, the work split), fused_cpu_runtime.h (BLAS, the
// threads), attention_rows.h (the vectorised row math); this file's .cc drives them.
//
// Dimension letters as in tiled_attention.h.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_CPU_ATTENTION_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_CPU_ATTENTION_H_

#include <cstdint>
#include <string>

#include <ATen/Tensor.h>

#include "worker/engine/kernels/block_kernel.h"
#include "worker/engine/kernels/cpu_isa.h"
#include "worker/engine/kernels/tiled_attention.h"

namespace ringtrain {

// Tile sizes; 0 = chosen from the head dim and the GQA group (FusedCpuTilingFor).
struct FusedCpuTiling {
  int64_t q_tile = 0;   // Tq: query rows per head in one row block (G·Tq rows in all)
  int64_t kv_tile = 0;  // Tk: keys per tile
};

// The tiling used for head dim `dim` and group `group` when `requested` leaves a size at 0; `bf16`:
// for bfloat16 GEMMs (taller row blocks).
FusedCpuTiling FusedCpuTilingFor(int64_t dim, int64_t group, FusedCpuTiling requested = {},
                                 bool bf16 = false);

// Forward of one causal block (key at p_k visible to the query at p_q iff p_k <= p_q). q (B, H,
// Lq, D), k and v (B, Hk, Lk, D), float32 or (all three) bfloat16, on the CPU; out and lse float32.
// Same contract as AttentionBlockForward (tiled_attention.h): out zero and lse −inf on rows that
// see no key.
BlockOutput FusedCpuAttentionForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const BlockPositions& q_pos, const BlockPositions& k_pos,
                                     double scale, FusedCpuTiling tiling = {},
                                     F32Gemm f32_gemm = ActiveF32Gemm());

// Backward of one causal block given the FINAL output's lse (B, H, Lq) and delta (B, H, Lq);
// float32 gradients that sum over blocks to the full ones.
BlockGrads FusedCpuAttentionBackward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& dout, const at::Tensor& delta,
                                     const at::Tensor& lse, const BlockPositions& q_pos,
                                     const BlockPositions& k_pos, double scale,
                                     FusedCpuTiling tiling = {},
                                     F32Gemm f32_gemm = ActiveF32Gemm());

class FusedCpuBlockKernel : public BlockKernel {
 public:
  // `bf16_gemm`: how bfloat16 inputs are multiplied (ActiveBf16Gemm(): by the CPU, or
  // RINGTRAIN_BF16_GEMM); `f32_gemm`: float32 ones (and widened bfloat16; ActiveF32Gemm()).
  explicit FusedCpuBlockKernel(FusedCpuTiling tiling = {}, Bf16Gemm bf16_gemm = ActiveBf16Gemm(),
                               F32Gemm f32_gemm = ActiveF32Gemm())
      : tiling_(tiling), bf16_gemm_(bf16_gemm), f32_gemm_(f32_gemm) {}
  BlockOutput Forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const BlockPositions& q_pos, const BlockPositions& k_pos,
                      double scale) override;
  BlockGrads Backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const at::Tensor& dout, const FinalStats& final, const BlockPositions& q_pos,
                      const BlockPositions& k_pos, double scale) override;
  // "cpu_flash: fused CPU (<isa>; float32 GEMMs <mkl|brgemm>, bf16 GEMMs <native|widen>, bf16
  // units <units>; tiles <q>×<kv>)"
  std::string Describe() const override;

 private:
  bool Native(const at::Tensor& q) const;  // bfloat16 q multiplied as bfloat16

  FusedCpuTiling tiling_;
  Bf16Gemm bf16_gemm_;
  F32Gemm f32_gemm_;
  TiledBlockKernel float64_;  // float64 inputs (the tests' references)
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_CPU_ATTENTION_H_
