// The attention plan's seam: the model calls one AttentionKernel chosen when the model is built —
// local tiled attention for cp = 1, ring attention for cp > 1 (worker/engine/parallel/). The model
// never includes parallel/; the plan is applied from outside with Transformer::SetAttentionKernel.
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_ATTENTION_KERNEL_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_ATTENTION_KERNEL_H_

#include <ATen/Tensor.h>

#include "worker/engine/kernels/tiled_attention.h"

namespace ringtrain {

class AttentionKernel {
 public:
  virtual ~AttentionKernel() = default;
  // Causal attention of this rank's tokens. q (B, H, L, D), k and v (B, Hk, L, D) where L is the
  // local length; `positions` (L,) are the tokens' global positions. Returns (B, H, L, D), with
  // autograd. Called from one thread at a time.
  virtual at::Tensor Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const BlockPositions& positions, double scale) = 0;
  AttentionStats& stats() { return stats_; }

 protected:
  AttentionStats stats_;
};

// cp = 1: the tiled kernel on the whole local sequence.
class LocalAttentionKernel : public AttentionKernel {
 public:
  explicit LocalAttentionKernel(AttentionTiling tiling = {}) : tiling_(tiling) {}
  at::Tensor Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const BlockPositions& positions, double scale) override {
    return LocalCausalAttention(q, k, v, positions, scale, tiling_, &stats_);
  }

 private:
  AttentionTiling tiling_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_ATTENTION_KERNEL_H_
