#include "worker/engine/parallel/ulysses_attention.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "worker/engine/kernels/block_kernel.h"
#include "worker/engine/parallel/mesh.h"
#include "worker/engine/parallel/ring_attention.h"

namespace ringtrain {

UlyssesAttentionPlan::UlyssesAttentionPlan(Communicator* comm, int64_t seq_len,
                                           LoadBalancer load_balancer, RotateMethod rotate_method,
                                           AttentionKernelKind kind)
    : comm_(comm),
      cp_(comm->mesh().cp),
      ulysses_(comm->mesh().ulysses),
      ulysses_rank_(comm->mesh().ulysses_rank()),
      ring_rank_(comm->mesh().ring_rank()) {
  TORCH_CHECK(ulysses_ > 1 && cp_ % ulysses_ == 0, "ulysses attention: a Ulysses degree of ",
              ulysses_, " does not divide cp ", cp_);
  for (int64_t r = 0; r < cp_; ++r) {
    shard_positions_.push_back(ShardPositions(seq_len, cp_, r, load_balancer));
  }
  if (comm->mesh().ring() > 1) {
    inner_ = std::make_shared<RingAttentionPlan>(comm, seq_len, load_balancer, rotate_method, kind);
  } else {
    inner_ = std::make_shared<LocalAttentionPlan>(MakeBlockKernel(kind, comm->device()));
  }
}

const UlyssesAttentionPlan::Layout& UlyssesAttentionPlan::LayoutOf(const BlockPositions& positions,
                                                                   const c10::Device& device) {
  if (layout_.sort.defined() && positions.cp_layout == layout_.source &&
      positions.documents == layout_.documents && layout_.sort.device() == device) {
    return layout_;
  }
  const std::vector<std::vector<int64_t>>& shards =
      positions.cp_layout ? *positions.cp_layout : shard_positions_;
  const int64_t first = ring_rank_ * ulysses_;
  TORCH_CHECK(positions.positions == shards[size_t(first + ulysses_rank_)],
              "ulysses attention: the batch was not sharded with this plan's layout");
  std::vector<int64_t> received;  // the group's positions as the all-to-all delivers them
  for (int64_t j = 0; j < ulysses_; ++j) {
    const std::vector<int64_t>& shard = shards[size_t(first + j)];
    received.insert(received.end(), shard.begin(), shard.end());
  }
  std::vector<int64_t> sort(received.size()), unsort(received.size());
  std::iota(sort.begin(), sort.end(), 0);
  std::sort(sort.begin(), sort.end(),
            [&](int64_t a, int64_t b) { return received[size_t(a)] < received[size_t(b)]; });
  Layout layout;
  layout.source = positions.cp_layout;
  layout.documents = positions.documents;
  layout.group.documents = positions.documents;
  layout.group.cp_layout = positions.cp_layout;
  for (size_t i = 0; i < sort.size(); ++i) {
    layout.group.positions.push_back(received[size_t(sort[i])]);
    unsort[size_t(sort[i])] = int64_t(i);
  }
  const auto index = torch::TensorOptions().dtype(torch::kLong);
  layout.sort = torch::tensor(sort, index).to(device);
  layout.unsort = torch::tensor(unsort, index).to(device);
  layout_ = std::move(layout);
  return layout_;
}

const UlyssesAttentionPlan::KvHeadChoice& UlyssesAttentionPlan::KvHeads(int64_t q_heads,
                                                                        int64_t heads,
                                                                        const c10::Device& device) {
  if (kv_heads_.q_heads == q_heads && kv_heads_.heads == heads &&
      (kv_heads_.index.empty() || kv_heads_.on_device.device() == device)) {
    return kv_heads_;
  }
  TORCH_CHECK(q_heads % ulysses_ == 0, "ulysses attention: ", q_heads,
              " query heads are not divisible by the Ulysses degree ", ulysses_);
  TORCH_CHECK(heads % ulysses_ == 0 || ulysses_ % heads == 0, "ulysses attention: ", heads,
              " K/V heads and the Ulysses degree ", ulysses_, ": one must divide the other");
  kv_heads_ = KvHeadChoice{q_heads, heads, {}, at::Tensor()};
  if (heads % ulysses_ == 0) return kv_heads_;  // split: head group j is the j-th slice
  // Replicated: each group rank gets the one K/V head its query heads share.
  const int64_t group = q_heads / heads;  // query heads per K/V head
  const int64_t per_rank = q_heads / ulysses_;
  for (int64_t j = 0; j < ulysses_; ++j) kv_heads_.index.push_back(j * per_rank / group);
  kv_heads_.on_device =
      torch::tensor(kv_heads_.index, torch::TensorOptions().dtype(torch::kLong)).to(device);
  return kv_heads_;
}

template <typename F>
auto UlyssesAttentionPlan::Inner(F&& f) -> decltype(f()) {
  inner_->stats() = stats_;
  auto result = f();
  stats_ = inner_->stats();
  return result;
}

std::vector<at::Tensor> UlyssesAttentionPlan::AllToAll(const std::vector<at::Tensor>& parts,
                                                       const char* what) {
  // One message per dtype: the parts' rows (one per group rank) side by side.
  std::map<c10::ScalarType, std::vector<size_t>> by_dtype;
  for (size_t i = 0; i < parts.size(); ++i) by_dtype[parts[i].scalar_type()].push_back(i);
  std::vector<at::Tensor> results(parts.size());
  CommStats& stats = comm_->stats();
  for (const auto& [dtype, members] : by_dtype) {
    std::vector<at::Tensor> rows;
    for (size_t i : members) rows.push_back(parts[i].reshape({ulysses_, -1}));
    at::Tensor send = rows.size() == 1 ? rows[0].contiguous() : torch::cat(rows, 1);
    at::Tensor recv = torch::empty_like(send);
    const int64_t sent = send.nbytes() / ulysses_ * (ulysses_ - 1);  // the own row stays here
    stats.bytes_sent += sent;
    stats.ring_bytes_sent += sent;
    const double before = stats.wait_seconds;
    CommCall(absl::StrCat("ulysses attention: all-to-all of ", what,
                          " over the Ulysses group (cp ranks ", ring_rank_ * ulysses_, " to ",
                          ring_rank_ * ulysses_ + ulysses_ - 1, ")"),
             [&] {
               PendingWork work = comm_->AllToAll(comm_->ulysses_group(), recv, send);
               comm_->Wait(work);
               return 0;
             });
    stats.ring_wait_seconds += stats.wait_seconds - before;  // nothing overlaps it
    int64_t offset = 0;
    for (size_t k = 0; k < members.size(); ++k) {
      const at::Tensor& part = parts[members[k]];
      const int64_t width = rows[k].size(1);
      results[members[k]] = recv.narrow(1, offset, width).reshape(part.sizes());
      offset += width;
    }
  }
  return results;
}

at::Tensor UlyssesAttentionPlan::SendByHeads(const at::Tensor& t, int64_t h,
                                             const at::Tensor& heads) const {
  const at::Tensor chosen = heads.defined() ? t.index_select(h, heads) : t;
  return chosen.unflatten(h, {ulysses_, chosen.size(h) / ulysses_}).movedim(h, 0).contiguous();
}

at::Tensor UlyssesAttentionPlan::ToHeads(const at::Tensor& received, int64_t h,
                                         const Layout& layout) const {
  // (u, …, Hu, Lc, …) → (…, Hu, u·Lc, …), group rank by group rank, → ascending positions.
  return received.movedim(0, h + 1).flatten(h + 1, h + 2).index_select(h + 1, layout.sort);
}

at::Tensor UlyssesAttentionPlan::SendByPositions(const at::Tensor& t, int64_t h,
                                                 const Layout& layout) const {
  const at::Tensor received_order = t.index_select(h + 1, layout.unsort);
  return received_order.unflatten(h + 1, {ulysses_, t.size(h + 1) / ulysses_})
      .movedim(h + 1, 0)
      .contiguous();
}

namespace {

// (u, …, Hu, Lc, …) with part j holding head group j → (…, u·Hu, Lc, …).
at::Tensor FromHeadGroups(const at::Tensor& received, int64_t h) {
  return received.movedim(0, h).flatten(h, h + 1);
}

}  // namespace

BlockOutput UlyssesAttentionPlan::Forward(const at::Tensor& q, const at::Tensor& kv,
                                          const BlockPositions& positions, double scale) {
  const Layout& layout = LayoutOf(positions, q.device());
  const at::Tensor& heads = KvHeads(q.size(1), kv.size(2), q.device()).on_device;
  const std::vector<at::Tensor> in =
      AllToAll({SendByHeads(q, 1, at::Tensor()), SendByHeads(kv, 2, heads)}, "Q and K/V");
  const at::Tensor qg = ToHeads(in[0], 1, layout);   // (B, Hu, Lg, D)
  const at::Tensor kvg = ToHeads(in[1], 2, layout);  // (2, B, Hk / u or 1, Lg, D)
  const BlockOutput group = Inner([&] { return inner_->Forward(qg, kvg, layout.group, scale); });
  // The output in the compute dtype (Attend's rounding, done before the transfer).
  const std::vector<at::Tensor> back =
      AllToAll({SendByPositions(group.out.to(q.scalar_type()), 1, layout),
                SendByPositions(group.lse, 1, layout)},
               "the attention output");
  BlockOutput result;
  result.out = FromHeadGroups(back[0], 1).to(group.out.scalar_type());
  result.lse = FromHeadGroups(back[1], 1);
  result.scores_computed = group.scores_computed;
  return result;
}

std::pair<at::Tensor, at::Tensor> UlyssesAttentionPlan::Backward(
    const at::Tensor& q, const at::Tensor& kv, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& dout, const BlockPositions& positions, double scale) {
  const Layout& layout = LayoutOf(positions, q.device());
  const KvHeadChoice& kv_heads = KvHeads(q.size(1), kv.size(2), q.device());
  const at::Tensor& heads = kv_heads.on_device;
  const std::vector<at::Tensor> in =
      AllToAll({SendByHeads(q, 1, at::Tensor()), SendByHeads(kv, 2, heads),
                SendByHeads(out, 1, at::Tensor()), SendByHeads(dout, 1, at::Tensor()),
                SendByHeads(lse, 1, at::Tensor())},
               "Q, K/V, the output and its gradient");
  const auto [dqg, dkvg] = Inner([&] {
    return inner_->Backward(ToHeads(in[0], 1, layout), ToHeads(in[1], 2, layout),
                            ToHeads(in[2], 1, layout), ToHeads(in[4], 1, layout),
                            ToHeads(in[3], 1, layout), layout.group, scale);
  });
  const std::vector<at::Tensor> back =
      AllToAll({SendByPositions(dqg, 1, layout), SendByPositions(dkvg, 2, layout)}, "dQ and dK/dV");
  at::Tensor dq = FromHeadGroups(back[0], 1);
  if (!heads.defined()) return {dq, FromHeadGroups(back[1], 2)};
  // Replicated K/V heads: each replica's gradient summed into its head, in group-rank order.
  at::Tensor dkv = torch::zeros(kv.sizes(), back[1].options());
  for (int64_t j = 0; j < ulysses_; ++j) {
    dkv.narrow(2, kv_heads.index[size_t(j)], 1).add_(back[1][j]);
  }
  return {dq, dkv};
}

std::string UlyssesAttentionPlan::Describe() const {
  return absl::StrCat("ulysses over groups of ", ulysses_, " (cp ", cp_, "), then ",
                      inner_->Describe());
}

std::shared_ptr<AttentionPlan> MakeUlyssesAttentionPlan(Communicator* comm, int64_t seq_len,
                                                        LoadBalancer load_balancer,
                                                        RotateMethod rotate_method,
                                                        AttentionKernelKind kind) {
  return std::make_shared<UlyssesAttentionPlan>(comm, seq_len, load_balancer, rotate_method, kind);
}

}  // namespace ringtrain
