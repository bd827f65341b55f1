// Ulysses context parallelism (DeepSpeed-Ulysses), and hybrid Ulysses × ring (USP, Megatron-Core's
// a2a+p2p): attention with the sequence sharded by heads instead of by positions.
//
// Outside attention every cp rank holds its shard of the sequence, as for ring attention (the load
// balancer's layout: head-tail, none or the document balancer). Around attention, one all-to-all
// over this rank's Ulysses group (mesh().ulysses consecutive cp ranks) turns the group's sequence
// shards of all heads into all of the group's positions for H / ulysses query heads: Q and
// stack(K, V) leave in one message per peer, their head group j to group rank j. K/V heads split
// the same way when the degree divides n_kv_heads; when n_kv_heads divides the degree each rank
// gets the one K/V head its query heads share (replicated, as USP does), and in backward the
// replicas' gradients are summed in group-rank order. The positions a group holds are put in
// ascending order (a permutation of the received rows), so the attention that follows sees runs of
// consecutive positions:
//   ulysses = cp   one block kernel call on the whole sequence (LocalAttentionPlan);
//   ulysses < cp   ring attention across the cp / ulysses groups (RingAttentionPlan over the
//                  communicator's ring group), each group's positions as one ring shard.
// A second all-to-all brings the output (in the compute dtype: Attend rounds it to that anyway, so
// this is bitwise what a float32 transfer would give) and the float32 log-sum-exp back to the
// sequence shards. Backward sends Q, K/V, output and its gradient again (nothing is kept between
// the passes: Attend saves the shards, so activation checkpointing keeps its savings), runs the
// inner backward, and returns dQ and dK/dV by the reverse all-to-all in float32.
//
// Every rank of a group computes the same share of the work (its heads over the group's positions),
// whatever the mask; the all-to-alls cannot overlap compute, so their time is all exposed
// (CommStats::ring_wait_seconds) and their bytes are the context-parallel attention's
// (ring_bytes_sent).
//
// Dimension letters as in kernels/tiled_attention.h; Lc is the local length, Lg = ulysses · Lc the
// group's, Hu = H / ulysses.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_ULYSSES_ATTENTION_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_ULYSSES_ATTENTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

#include "common/config/choices.h"
#include "worker/engine/model/attention_plan.h"
#include "worker/engine/parallel/comm.h"

namespace ringtrain {

class UlyssesAttentionPlan : public AttentionPlan {
 public:
  // `comm` must outlive the plan; its mesh's ulysses > 1 and divides cp. `seq_len` is the global
  // length L; shards follow ShardPositions(L, cp, ·, load_balancer) unless a batch brings its own
  // layout. The rotate method and block kernel are the ring's (hybrid) or the local call's.
  UlyssesAttentionPlan(Communicator* comm, int64_t seq_len, LoadBalancer load_balancer,
                       RotateMethod rotate_method,
                       AttentionKernelKind kind = AttentionKernelKind::kAuto);

  // q (B, H, Lc, D), kv (2, B, Hk, Lc, D): this rank's shard; `positions` must equal its shard.
  // H must be divisible by the Ulysses degree, and Hk divide it or be divisible by it.
  BlockOutput Forward(const at::Tensor& q, const at::Tensor& kv, const BlockPositions& positions,
                      double scale) override;
  std::pair<at::Tensor, at::Tensor> Backward(const at::Tensor& q, const at::Tensor& kv,
                                             const at::Tensor& out, const at::Tensor& lse,
                                             const at::Tensor& dout,
                                             const BlockPositions& positions,
                                             double scale) override;
  std::string Describe() const override;

 private:
  // One batch's layout: the group's positions in ascending order and the permutation from the
  // received order (group rank by group rank) to it.
  struct Layout {
    std::shared_ptr<const std::vector<std::vector<int64_t>>> source;  // positions.cp_layout
    std::shared_ptr<const DocumentMask> documents;
    BlockPositions group;  // what the inner plan sees (documents and cp_layout passed on)
    at::Tensor sort;       // (Lg,) received row → ascending: group = received[sort]
    at::Tensor unsort;     // (Lg,) the inverse
  };
  const Layout& LayoutOf(const BlockPositions& positions, const c10::Device& device);
  // Which K/V head goes to each group rank when they are replicated (`index`, one per group rank,
  // and the same on the device); both empty when the K/V heads split evenly. Worked out for the
  // first call's head counts and kept.
  struct KvHeadChoice {
    int64_t q_heads = -1, heads = -1;
    std::vector<int64_t> index;
    at::Tensor on_device;
  };
  const KvHeadChoice& KvHeads(int64_t q_heads, int64_t heads, const c10::Device& device);
  // The inner plan's call, its figures kept in this plan's.
  template <typename F>
  auto Inner(F&& f) -> decltype(f());

  // The all-to-all over the Ulysses group: part j of each tensor (dim 0, size ulysses) to group
  // rank j; each result's part i came from group rank i. Tensors of one dtype, one message.
  std::vector<at::Tensor> AllToAll(const std::vector<at::Tensor>& parts, const char* what);
  // Sequence shards → head shards: t with heads at dim `h` (and positions at h + 1), `heads` (if
  // defined) the heads to send, to each rank in turn → (…, Hu, Lg, …) in ascending positions.
  at::Tensor ToHeads(const at::Tensor& received, int64_t h, const Layout& layout) const;
  at::Tensor SendByHeads(const at::Tensor& t, int64_t h, const at::Tensor& heads) const;
  // Head shards → sequence shards: (…, Hu, Lg, …) ascending → the parts to send back.
  at::Tensor SendByPositions(const at::Tensor& t, int64_t h, const Layout& layout) const;

  Communicator* comm_;
  int64_t cp_, ulysses_, ulysses_rank_, ring_rank_;
  std::vector<std::vector<int64_t>> shard_positions_;  // per cp rank: the fixed layout
  std::shared_ptr<AttentionPlan> inner_;
  Layout layout_;
  KvHeadChoice kv_heads_;
};

// context_parallel.h's registry entry for both ulysses and hybrid (the mesh's ulysses degree
// tells them apart).
std::shared_ptr<AttentionPlan> MakeUlyssesAttentionPlan(Communicator* comm, int64_t seq_len,
                                                        LoadBalancer load_balancer,
                                                        RotateMethod rotate_method,
                                                        AttentionKernelKind kind);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_ULYSSES_ATTENTION_H_
