// The unit ring attention is made of: attention of one query block against one key/value block,
// causal by the tokens' global positions, returning the output and the per-row log-sum-exp (so
// blocks merge in float32), and its backward given the FINAL output's statistics. Three kernels sit
// behind this interface, one chosen per rank when the attention plan is built (MakeBlockKernel,
// from training.attention_kernel):
//
//   tiled      kernels/tiled_attention.h: K/V tiles merged by online softmax, in float32 (inputs
//              of another dtype are widened first). The reference, and the fallback for any block.
//   torch_flash  FusedBlockKernel: PyTorch's fused SDPA kernels with log-sum-exp: on CUDA flash
//              (_scaled_dot_product_flash_attention), or memory-efficient or cuDNN where flash
//              does not apply (PyTorch's own choice for the shapes, at::_fused_sdp_choice, with
//              flash ahead of cuDNN where flash takes the shapes; unless one is forced); on the
//              CPU PyTorch's CPU flash kernel (_scaled_dot_product_flash_attention_for_cpu). A
//              block is cut into full/causal calls by PlanFusedCalls (block_plan.h); calls are
//              merged by log-sum-exp in float32; with packed documents each batch row is cut at its
//              document bounds (PlanDocumentCalls), so no call spans two documents. K/V heads are
//              expanded to the query heads for the call (GQA) and dK/dV summed back over each
//              group.
//   cpu_flash  FusedCpuBlockKernel (kernels/fused_cpu_attention.h): ringtrain's own fused CPU
//              kernel, GQA without expanding K/V.
//
// "auto" (the default) is torch_flash on CUDA and cpu_flash on the CPU.
//
// Dimension letters as in tiled_attention.h.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_BLOCK_KERNEL_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_BLOCK_KERNEL_H_

#include <memory>
#include <string>
#include <vector>

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include "common/config/choices.h"
#include "worker/engine/kernels/block_plan.h"
#include "worker/engine/kernels/tiled_attention.h"

namespace ringtrain {

// Which fused kernel a FusedBlockKernel calls. kAuto: PyTorch's choice on CUDA, the CPU flash
// kernel on the CPU. The others force one (the GPU check compares each with the CPU).
enum class FusedBackend { kAuto, kFlash, kEfficient, kCudnn, kCpuFlash };
const char* FusedBackendName(FusedBackend backend);

// The dtype blocks are merged and gradients accumulated in: float32 for bfloat16 / float16 inputs,
// otherwise the inputs' own (float32, or float64 in the tests).
c10::ScalarType AccumulateType(c10::ScalarType compute);
at::Tensor Widen(const at::Tensor& x);  // x in AccumulateType(x.scalar_type())

// What a block's backward needs of the final (merged) attention output and its gradient: `out`
// (B, H, Lq, D) in the compute dtype, `lse` (B, H, Lq) in the accumulate type, `dout` (B, H, Lq,
// D). delta() = rowsum(dout · out) in the accumulate type, computed on first use: only the tiled
// kernel reads it (the fused kernels compute their own), and a ring pass computes it once for all
// blocks.
struct FinalStats {
  at::Tensor out, lse, dout;
  const at::Tensor& delta() const;
  // Query rows [begin, end) of each, contiguous (with delta's, when computed already).
  FinalStats Rows(int64_t begin, int64_t end) const;

 private:
  mutable at::Tensor delta_;
};
FinalStats MakeFinalStats(const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout);

class BlockKernel {
 public:
  virtual ~BlockKernel() = default;
  // q (B, H, Lq, D), k and v (B, Hk, Lk, D), contiguous, in the compute dtype. Returns out and lse
  // in the accumulate type (out zero and lse −inf on rows that see no key).
  virtual BlockOutput Forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const BlockPositions& q_pos, const BlockPositions& k_pos,
                              double scale) = 0;
  // dout (B, H, Lq, D) in the compute dtype. Gradients in the accumulate type; block gradients
  // sum to the full ones.
  virtual BlockGrads Backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& dout, const FinalStats& final,
                              const BlockPositions& q_pos, const BlockPositions& k_pos,
                              double scale) = 0;
  virtual std::string Describe() const = 0;  // "tiled 256×256", "fused (flash)", for the log
};

class TiledBlockKernel : public BlockKernel {
 public:
  explicit TiledBlockKernel(AttentionTiling tiling = {}) : tiling_(tiling) {}
  BlockOutput Forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const BlockPositions& q_pos, const BlockPositions& k_pos,
                      double scale) override;
  BlockGrads Backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const at::Tensor& dout, const FinalStats& final, const BlockPositions& q_pos,
                      const BlockPositions& k_pos, double scale) override;
  std::string Describe() const override;

 private:
  AttentionTiling tiling_;
};

class FusedBlockKernel : public BlockKernel {
 public:
  // `fallback_tiling` is used for blocks PlanFusedCalls cannot cut (see block_plan.h).
  explicit FusedBlockKernel(FusedBackend backend = FusedBackend::kAuto,
                            AttentionTiling fallback_tiling = {})
      : backend_(backend), fallback_(fallback_tiling) {}
  BlockOutput Forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const BlockPositions& q_pos, const BlockPositions& k_pos,
                      double scale) override;
  BlockGrads Backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const at::Tensor& dout, const FinalStats& final, const BlockPositions& q_pos,
                      const BlockPositions& k_pos, double scale) override;
  std::string Describe() const override;
  // The kernel a call on these tensors runs: `backend_` unless kAuto, then PyTorch's choice on
  // CUDA (flash, efficient or cuDNN; INVALID_ARGUMENT-style c10::Error when none applies) and
  // kCpuFlash on the CPU.
  FusedBackend Resolve(const at::Tensor& q, const at::Tensor& k, bool causal) const;

 private:
  // The calls of one plan (block_plan.h) on q, k, v, merged by log-sum-exp.
  BlockOutput RunForward(const std::vector<FusedCall>& plan, const at::Tensor& q,
                         const at::Tensor& k, const at::Tensor& v, double scale);
  BlockGrads RunBackward(const std::vector<FusedCall>& plan, const at::Tensor& q,
                         const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                         const FinalStats& final, double scale);

  FusedBackend backend_;
  TiledBlockKernel fallback_;
};

// The kernel a rank uses for training.attention_kernel: kAuto is FusedBlockKernel (PyTorch's
// choice) on CUDA and FusedCpuBlockKernel on the CPU. `tiling` is the tiled kernel's (and
// FusedBlockKernel's fallback's); FusedCpuBlockKernel sizes its own tiles.
std::shared_ptr<BlockKernel> MakeBlockKernel(AttentionKernelKind kind, const c10::Device& device,
                                             AttentionTiling tiling = {});

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_BLOCK_KERNEL_H_
