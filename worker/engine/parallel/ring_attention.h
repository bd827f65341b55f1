// Ring attention for context parallelism: each CP rank holds its shard of the sequence (q, k, v of
// its positions); K/V blocks visit every rank of the CP group, each block is computed with the
// engine's tiled kernel, and the partial results are merged by log-sum-exp in float32.
//
//   alltoall   K/V pass to the next rank each step with async send/recv; the transfer for step
//              i+1 is issued before step i's compute, so they overlap.
//   allgather  one all-gather of K/V, then the same block loop.
// Backward: K/V rotate again (or are all-gathered again), dQ accumulates locally, and each block's
// dK/dV accumulator travels around the ring with its block and arrives home (allgather: the
// per-block gradients are reduce-scattered with one all-to-all and summed in ring order).
// Blocks the causal mask hides entirely are never computed; with head-tail sharding every step after
// the first computes exactly half a block on every rank. K/V move with n_kv_heads heads.
//
// Dimension letters as in kernels/tiled_attention.h; Lc = L / cp is the local length.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_RING_ATTENTION_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_RING_ATTENTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "worker/engine/model/attention_kernel.h"
#include "worker/engine/parallel/comm.h"

namespace ringtrain {

class RingAttentionKernel : public AttentionKernel {
 public:
  // `comm` must outlive the kernel. `seq_len` is the global length L; shards follow
  // ShardPositions(L, cp, ·, load_balancer). rotate_method: "alltoall" | "allgather".
  RingAttentionKernel(Communicator* comm, int64_t seq_len, std::string load_balancer,
                      std::string rotate_method);

  // q (B, H, Lc, D), k/v (B, Hk, Lc, D): this rank's shard; `positions` must equal its shard.
  at::Tensor Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const BlockPositions& positions, double scale) override;

  // Implementation, used by the autograd function.
  struct Saved;
  BlockOutput Forward(const at::Tensor& q, const at::Tensor& kv, double scale);
  // Returns (dq, dkv) for this rank's shard.
  std::pair<at::Tensor, at::Tensor> Backward(const at::Tensor& q, const at::Tensor& kv,
                                             const at::Tensor& out, const at::Tensor& lse,
                                             const at::Tensor& dout, double scale);

 private:
  int64_t Source(int64_t step) const;  // cp rank whose block this rank holds at `step`
  std::vector<at::Tensor> AllGatherKv(const at::Tensor& kv);  // (cp,) blocks, by cp rank
  BlockOutput ComputeBlock(const at::Tensor& q, const at::Tensor& kv, int64_t src, double scale);
  BlockGrads ComputeBlockGrads(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& dout,
                               const at::Tensor& delta, const at::Tensor& lse, int64_t src,
                               double scale);

  Communicator* comm_;
  int64_t cp_, cp_rank_;
  std::string rotate_method_;
  std::vector<BlockPositions> shard_positions_;  // per cp rank
  AttentionTiling tiling_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_RING_ATTENTION_H_
