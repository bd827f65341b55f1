// Ring attention for context parallelism: each CP rank holds its shard of the sequence (q, k, v of
// its positions); K/V blocks visit every rank of the CP group (kv_exchange.h: alltoall or
// allgather), each block is computed with one block kernel (kernels/block_kernel.h: tiled, or the
// fused SDPA kernels), and the partial results are merged by log-sum-exp in float32. Backward: the
// blocks visit again, dQ accumulates locally, and each block's dK/dV is summed back to its owner by
// the same exchange. Blocks the mask (causal, or block-causal over packed documents) hides
// entirely from a rank are never computed there, nor sent where the rotate method allows
// (kv_exchange.h); with head-tail sharding and plain causal attention every step after the first
// computes exactly half a block on every rank. Each batch brings its layout (BlockPositions'
// cp_layout: the document balancer plans it per batch) and its documents. K/V move with
// n_kv_heads heads.
//
// Dimension letters as in kernels/tiled_attention.h; Lc = L / cp is the local length.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_RING_ATTENTION_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_RING_ATTENTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config/choices.h"
#include "worker/engine/model/attention_plan.h"
#include "worker/engine/parallel/comm.h"
#include "worker/engine/parallel/kv_exchange.h"

namespace ringtrain {

class RingAttentionPlan : public AttentionPlan {
 public:
  // `comm` must outlive the kernel. `seq_len` is the global length L; shards follow
  // ShardPositions(L, cp, ·, load_balancer). Own it with std::make_shared (AttentionPlan).
  // With Ulysses groups (comm->mesh().ulysses > 1: inside UlyssesAttentionPlan, hybrid) the ring
  // runs across the groups (RingMembers::Of): a rank's shard is then its whole group's positions
  // (UlyssesGroupPositions) for the heads the Ulysses all-to-all gave it.
  // `kind` picks the block kernel for comm->device() (MakeBlockKernel); the tiled kernel's tiles
  // divide the shard's chunks.
  RingAttentionPlan(Communicator* comm, int64_t seq_len, LoadBalancer load_balancer,
                    RotateMethod rotate_method,
                    AttentionKernelKind kind = AttentionKernelKind::kAuto);

  // q (B, H, Lc, D), kv (2, B, Hk, Lc, D): this rank's shard; `positions` must equal its shard.
  BlockOutput Forward(const at::Tensor& q, const at::Tensor& kv, const BlockPositions& positions,
                      double scale) override;
  std::pair<at::Tensor, at::Tensor> Backward(const at::Tensor& q, const at::Tensor& kv,
                                             const at::Tensor& out, const at::Tensor& lse,
                                             const at::Tensor& dout,
                                             const BlockPositions& positions,
                                             double scale) override;
  std::string Describe() const override;
  const BlockKernel& block_kernel() const { return *block_; }

 private:
  // One batch's layout: every ring rank's positions (with the batch's documents) and which blocks
  // each rank needs. Kept for the batch's next calls (every layer, forward and backward).
  struct Layout {
    std::shared_ptr<const std::vector<std::vector<int64_t>>> source;  // positions.cp_layout
    std::shared_ptr<const DocumentMask> documents;
    std::vector<BlockPositions> shards;  // per ring rank
    BlockNeeds needs;
  };
  const Layout& LayoutOf(const BlockPositions& positions);
  // Where the backward splits this rank's own block (query rows [0, split) first, the rest last).
  int64_t OwnBlockSplit(int64_t local_len) const;

  RingMembers ring_;
  int64_t cp_, cp_rank_;  // the ring's size and this rank's place in it
  int64_t ulysses_;       // the Ulysses group size (1: the ring is the cp group)
  std::unique_ptr<KvExchange> exchange_;
  std::vector<BlockPositions> shard_positions_;  // per ring rank: the load balancer's fixed layout
  std::shared_ptr<BlockKernel> block_;
  int64_t tile_ = 1;  // the block kernel's tile (it divides the shard's chunks)
  Layout layout_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_RING_ATTENTION_H_
