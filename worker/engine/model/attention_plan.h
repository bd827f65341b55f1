// The attention plan: how the model's attention of this rank's tokens is computed. The model
// calls one AttentionPlan chosen when the job is parallelised — local attention for cp = 1, or the
// context-parallel method's plan for cp > 1 (worker/engine/parallel/parallelize.h: ring attention
// today). The model never includes parallel/; the plan is applied from outside with
// Transformer::SetAttentionPlan.
//
// Every plan goes through one autograd function (Attend): it stacks K and V into one block, calls
// the plan's Forward, saves what Backward needs — the plan itself by shared_ptr, so a backward
// pass can never outlive it — and on backward calls the plan's Backward. A plan computes its
// blocks with one BlockKernel (kernels/block_kernel.h: tiled, torch_flash or cpu_flash), chosen
// when it is built.
//
// Dtypes: q, k, v come in the compute dtype (float32, or bfloat16 under mixed precision) and K/V
// travel the ring in it; block outputs, log-sum-exp merges and gradient accumulators are float32;
// Attend returns the output, and its backward the gradients, in the inputs' dtype.
//
// Dimension letters as in kernels/tiled_attention.h; L is the local (this rank's) length.
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_ATTENTION_PLAN_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_ATTENTION_PLAN_H_

#include <memory>
#include <string>
#include <utility>

#include <ATen/Tensor.h>

#include "worker/engine/kernels/block_kernel.h"
#include "worker/engine/kernels/tiled_attention.h"

namespace ringtrain {

// Selective ("op") activation checkpointing keeps one Attend call's result from the first forward
// here, so the block's recompute rebuilds the autograd node without running the kernel again.
struct AttentionMemo {
  at::Tensor out;  // (B, H, L, D), the compute dtype
  at::Tensor lse;  // Forward's log-sum-exp, float32
};

// Plans must be owned by a std::shared_ptr (std::make_shared): Attend's backward holds one.
// Called from one thread at a time.
class AttentionPlan : public std::enable_shared_from_this<AttentionPlan> {
 public:
  virtual ~AttentionPlan() = default;

  // Causal attention of this rank's tokens, with autograd. q (B, H, L, D), k and v (B, Hk, L, D);
  // `positions` (L,) are the tokens' global positions. Returns (B, H, L, D).
  // With a `memo`: an empty one receives Forward's output and log-sum-exp; a filled one (from an
  // Attend of the same q, k, v) is used instead of calling Forward — the autograd node is rebuilt,
  // nothing is computed or exchanged — and is emptied.
  at::Tensor Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const BlockPositions& positions, double scale, AttentionMemo* memo = nullptr);

  // The two halves of Attend, for its autograd function. q (B, H, L, D) and kv = stack(k, v)
  // (2, B, Hk, L, D), both contiguous, in the compute dtype; Forward's out and lse are float32.
  virtual BlockOutput Forward(const at::Tensor& q, const at::Tensor& kv,
                              const BlockPositions& positions, double scale) = 0;
  // Given Forward's out (in the compute dtype) and lse, and dout (B, H, L, D): (dq (B, H, L, D),
  // dkv (2, B, Hk, L, D)), float32.
  virtual std::pair<at::Tensor, at::Tensor> Backward(const at::Tensor& q, const at::Tensor& kv,
                                                     const at::Tensor& out, const at::Tensor& lse,
                                                     const at::Tensor& dout,
                                                     const BlockPositions& positions,
                                                     double scale) = 0;

  // "local, <block kernel>", "ring over cp 2, blocks <block kernel>": for the log.
  virtual std::string Describe() const = 0;

  AttentionStats& stats() { return stats_; }

 protected:
  AttentionStats stats_;
};

// cp = 1: one block kernel on the whole local sequence. The default constructor's is the tiled
// kernel (the model's default plan, tests); the trainer passes MakeBlockKernel's choice.
class LocalAttentionPlan : public AttentionPlan {
 public:
  explicit LocalAttentionPlan(AttentionTiling tiling = {})
      : block_(std::make_shared<TiledBlockKernel>(tiling)) {}
  explicit LocalAttentionPlan(std::shared_ptr<BlockKernel> block) : block_(std::move(block)) {}

  BlockOutput Forward(const at::Tensor& q, const at::Tensor& kv, const BlockPositions& positions,
                      double scale) override;
  std::pair<at::Tensor, at::Tensor> Backward(const at::Tensor& q, const at::Tensor& kv,
                                             const at::Tensor& out, const at::Tensor& lse,
                                             const at::Tensor& dout,
                                             const BlockPositions& positions,
                                             double scale) override;
  std::string Describe() const override { return "local, " + block_->Describe(); }
  const BlockKernel& block_kernel() const { return *block_; }

 private:
  std::shared_ptr<BlockKernel> block_;
};

// Local causal attention with autograd on a fresh LocalAttentionPlan (tests and references):
// q (B, H, L, D), k, v (B, Hk, L, D).
at::Tensor LocalCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const BlockPositions& positions, double scale,
                                const AttentionTiling& tiling);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_ATTENTION_PLAN_H_
