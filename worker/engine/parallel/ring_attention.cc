#include "worker/engine/parallel/ring_attention.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "worker/engine/kernels/document_mask.h"
#include "worker/engine/parallel/context_parallel.h"
#include "worker/engine/parallel/mesh.h"

namespace ringtrain {
namespace {

// Largest tile ≤ 256 that divides the chunk length, so no tile straddles two chunks and the
// causal skip works at chunk granularity.
int64_t TileFor(int64_t chunk) {
  for (int64_t t = std::min<int64_t>(256, chunk); t > 1; --t) {
    if (chunk % t == 0) return t;
  }
  return 1;
}

}  // namespace

RingAttentionPlan::RingAttentionPlan(Communicator* comm, int64_t seq_len,
                                     LoadBalancer load_balancer, RotateMethod rotate_method,
                                     AttentionKernelKind kind)
    : ring_(RingMembers::Of(*comm)),
      cp_(ring_.size),
      cp_rank_(ring_.rank),
      ulysses_(comm->mesh().ulysses),
      exchange_(MakeKvExchange(rotate_method, comm, ring_)) {
  const int64_t cp = comm->mesh().cp;
  std::vector<std::vector<int64_t>> shards;
  for (int64_t r = 0; r < cp; ++r) shards.push_back(ShardPositions(seq_len, cp, r, load_balancer));
  for (int64_t r = 0; r < cp_; ++r) {
    shard_positions_.push_back({UlyssesGroupPositions(shards, ulysses_, r)});
  }
  tile_ = TileFor(ShardChunkLength(seq_len, cp, load_balancer));
  // The document balancer's chunks are the shard's runs; head-tail's chunks split into them too.
  block_ = MakeBlockKernel(kind, comm->device(), {tile_, tile_});
}

const RingAttentionPlan::Layout& RingAttentionPlan::LayoutOf(const BlockPositions& positions) {
  if (positions.cp_layout == layout_.source && positions.documents == layout_.documents &&
      layout_.source != nullptr) {
    return layout_;
  }
  Layout layout;
  layout.source = positions.cp_layout;
  layout.documents = positions.documents;
  for (int64_t r = 0; r < cp_; ++r) {
    BlockPositions p;
    p.positions = positions.cp_layout ? UlyssesGroupPositions(*positions.cp_layout, ulysses_, r)
                                      : shard_positions_[size_t(r)].positions;
    p.documents = positions.documents;
    layout.shards.push_back(std::move(p));
  }
  TORCH_CHECK(positions.positions == layout.shards[size_t(cp_rank_)].positions,
              "ring attention: the batch was not sharded with this kernel's layout");
  // Which blocks each rank's queries can see: the rest are neither computed nor (where the rotate
  // method allows) sent.
  layout.needs.assign(size_t(cp_), std::vector<bool>(size_t(cp_), true));
  for (int64_t dst = 0; dst < cp_; ++dst) {
    for (int64_t src = 0; src < cp_; ++src) {
      if (dst == src) continue;
      layout.needs[size_t(dst)][size_t(src)] =
          AnyVisible(layout.shards[size_t(dst)].positions, layout.shards[size_t(src)].positions,
                     positions.mask());
    }
  }
  layout_ = std::move(layout);
  return layout_;
}

BlockOutput RingAttentionPlan::Forward(const at::Tensor& q, const at::Tensor& kv,
                                       const BlockPositions& positions, double scale) {
  const Layout& layout = LayoutOf(positions);
  const auto acc = q.options().dtype(AccumulateType(q.scalar_type()));
  // The first block computed is the running result as it is (merging it into zeros and −inf would
  // give it back); the later ones merge into it.
  BlockOutput merged;
  stats_.scores_per_step.clear();
  exchange_->Begin(kv, layout.needs);
  for (int64_t step = 0; step < cp_; ++step) {
    const int64_t src = RingSource(cp_rank_, cp_, step);
    exchange_->Prefetch(step);
    if (!layout.needs[size_t(cp_rank_)][size_t(src)]) {  // hidden from every query here
      stats_.blocks_skipped += 1;
      stats_.scores_per_step.push_back(0);
      exchange_->Advance(step);
      continue;
    }
    BlockOutput block_out;
    {
      AttentionComputeTimer timer(stats_);
      const at::Tensor& block = exchange_->Block(step);
      block_out =
          block_->Forward(q, block[0], block[1], positions, layout.shards[size_t(src)], scale);
    }
    stats_.scores_computed += block_out.scores_computed;
    stats_.scores_per_step.push_back(block_out.scores_computed);
    if (merged.out.defined()) {
      MergeBlockInto(merged.out, merged.lse, block_out);
    } else {
      merged.out = block_out.out.to(acc);
      merged.lse = block_out.lse.to(acc);
    }
    exchange_->Advance(step);
  }
  if (!merged.out.defined()) {  // no block visible (never so with causal masks: the own block is)
    merged.out = torch::zeros(q.sizes(), acc);
    merged.lse = torch::full({q.size(0), q.size(1), q.size(2)}, -INFINITY, acc);
  }
  return merged;
}

std::pair<at::Tensor, at::Tensor> RingAttentionPlan::Backward(
    const at::Tensor& q, const at::Tensor& kv, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& dout, const BlockPositions& positions, double scale) {
  const Layout& layout = LayoutOf(positions);
  const FinalStats final = MakeFinalStats(out, lse, dout);
  at::Tensor dq = torch::zeros(q.sizes(), q.options().dtype(AccumulateType(q.scalar_type())));
  // With other ranks in the ring, this rank's own block is computed in two parts of its query
  // rows: [0, split) at step 0, hiding the first K/V hop, and [split, Lc) after the last step,
  // hiding the last dK/dV hop home (which otherwise nothing overlaps).
  const int64_t split = cp_ > 1 ? OwnBlockSplit(q.size(2)) : 0;
  auto own_rows = [&](int64_t begin, int64_t end) {
    AttentionComputeTimer timer(stats_);
    BlockPositions rows = positions;
    rows.positions.assign(positions.positions.begin() + begin, positions.positions.begin() + end);
    const auto part = [&](const at::Tensor& t) { return t.narrow(2, begin, end - begin); };
    BlockGrads g = block_->Backward(part(q).contiguous(), kv[0], kv[1], part(dout).contiguous(),
                                    final.Rows(begin, end), rows, positions, scale);
    part(dq).add_(g.dq);
    return torch::stack({g.dk, g.dv});
  };
  exchange_->Begin(kv, layout.needs);
  for (int64_t step = 0; step < cp_; ++step) {
    const int64_t src = RingSource(cp_rank_, cp_, step);
    exchange_->Prefetch(step);
    if (!layout.needs[size_t(cp_rank_)][size_t(src)]) {
      stats_.blocks_skipped += 1;
      exchange_->AddBlockGrad(step, at::Tensor());
      exchange_->Advance(step);
      continue;
    }
    at::Tensor dkv;
    if (step == 0 && split > 0) {
      dkv = own_rows(0, split);
    } else {
      BlockGrads g;
      {
        AttentionComputeTimer timer(stats_);
        const at::Tensor& block = exchange_->Block(step);
        g = block_->Backward(q, block[0], block[1], dout, final, positions,
                             layout.shards[size_t(src)], scale);
      }
      dq.add_(g.dq);
      dkv = torch::stack({g.dk, g.dv});
    }
    exchange_->AddBlockGrad(step, dkv);
    exchange_->Advance(step);
  }
  const at::Tensor own_rest = split > 0 ? own_rows(split, q.size(2)) : at::Tensor();
  return {dq, exchange_->FinishGrads(own_rest)};
}

int64_t RingAttentionPlan::OwnBlockSplit(int64_t local_len) const {
  // Half the rows, on a tile boundary so the parts' tiles are the whole block's.
  return (local_len / 2) / tile_ * tile_;
}

std::string RingAttentionPlan::Describe() const {
  if (ulysses_ > 1) {
    return absl::StrCat("ring over ", cp_, " Ulysses groups of ", ulysses_, ", blocks ",
                        block_->Describe());
  }
  return absl::StrCat("ring over cp ", cp_, ", blocks ", block_->Describe());
}

std::shared_ptr<AttentionPlan> MakeRingAttentionPlan(const ContextParallelArgs& args) {
  return std::make_shared<RingAttentionPlan>(args.comm, args.seq_len, args.load_balancer,
                                             args.rotate_method, args.block_kernel);
}

}  // namespace ringtrain
