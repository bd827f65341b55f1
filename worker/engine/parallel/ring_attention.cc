#include "worker/engine/parallel/ring_attention.h"

#include <torch/torch.h>

#include <chrono>

#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kKvTag = 1;   // K/V blocks moving forward around the ring
constexpr int kDkvTag = 2;  // dK/dV accumulators travelling home

// Largest tile ≤ 256 that divides the chunk length, so no tile straddles two chunks and the
// causal skip works at chunk granularity.
int64_t TileFor(int64_t chunk) {
  for (int64_t t = std::min<int64_t>(256, chunk); t > 1; --t) {
    if (chunk % t == 0) return t;
  }
  return 1;
}

// Waits for a ring receive that was overlapped with compute, recording the exposed wait.
void WaitOverlapped(Communicator& comm, const c10::intrusive_ptr<c10d::Work>& recv) {
  CommStats& stats = comm.stats();
  const double before = stats.wait_seconds;
  comm.Wait(recv);
  stats.ring_wait_seconds += stats.wait_seconds - before;
}

// Wraps one c10d call so that a failure names the ring peer involved.
template <typename F>
auto WithPeer(const char* what, int64_t peer, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    throw std::runtime_error(absl::StrCat("ring attention: ", what, " cp rank ", peer,
                                          " failed: ", e.what()));
  }
}

class RingAttentionFunction : public torch::autograd::Function<RingAttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, RingAttentionKernel* kernel,
                            double scale) {
    const at::Tensor qc = q.contiguous();
    const at::Tensor kv = torch::stack({k, v}).contiguous();  // (2, B, Hk, Lc, D)
    BlockOutput result = kernel->Forward(qc, kv, scale);
    ctx->save_for_backward({qc, kv, result.out, result.lse});
    ctx->saved_data["kernel"] = reinterpret_cast<int64_t>(kernel);
    ctx->saved_data["scale"] = scale;
    return result.out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto* kernel = reinterpret_cast<RingAttentionKernel*>(ctx->saved_data["kernel"].toInt());
    const auto saved = ctx->get_saved_variables();
    auto [dq, dkv] = kernel->Backward(saved[0], saved[1], saved[2], saved[3],
                                      grad_outputs[0].contiguous(),
                                      ctx->saved_data["scale"].toDouble());
    return {dq, dkv[0], dkv[1], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

RingAttentionKernel::RingAttentionKernel(Communicator* comm, int64_t seq_len,
                                         std::string load_balancer, std::string rotate_method)
    : comm_(comm),
      cp_(comm->mesh().cp),
      cp_rank_(comm->mesh().cp_rank()),
      rotate_method_(std::move(rotate_method)) {
  for (int64_t r = 0; r < cp_; ++r) {
    shard_positions_.push_back({ShardPositions(seq_len, cp_, r, load_balancer)});
  }
  const int64_t tile = TileFor(ShardChunkLength(seq_len, cp_, load_balancer));
  tiling_ = {tile, tile};
}

int64_t RingAttentionKernel::Source(int64_t step) const {
  return ((cp_rank_ - step) % cp_ + cp_) % cp_;
}

at::Tensor RingAttentionKernel::Attend(const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const BlockPositions& positions,
                                       double scale) {
  TORCH_CHECK(positions.positions == shard_positions_[cp_rank_].positions,
              "ring attention: the batch was not sharded with this kernel's layout");
  return RingAttentionFunction::apply(q, k, v, this, scale);
}

BlockOutput RingAttentionKernel::ComputeBlock(const at::Tensor& q, const at::Tensor& kv,
                                              int64_t src, double scale) {
  AttentionComputeTimer timer(stats_);
  BlockOutput block = AttentionBlockForward(q, kv[0], kv[1], shard_positions_[cp_rank_],
                                            shard_positions_[src], MaskKind::kCausal, scale,
                                            tiling_);
  stats_.scores_computed += block.scores_computed;
  stats_.scores_per_step.push_back(block.scores_computed);
  return block;
}

BlockGrads RingAttentionKernel::ComputeBlockGrads(const at::Tensor& q, const at::Tensor& kv,
                                                  const at::Tensor& dout, const at::Tensor& delta,
                                                  const at::Tensor& lse, int64_t src,
                                                  double scale) {
  AttentionComputeTimer timer(stats_);
  return AttentionBlockBackward(q, kv[0], kv[1], dout, delta, lse, shard_positions_[cp_rank_],
                                shard_positions_[src], MaskKind::kCausal, scale, tiling_);
}

std::vector<at::Tensor> RingAttentionKernel::AllGatherKv(const at::Tensor& kv) {
  std::vector<at::Tensor> input = {kv};
  std::vector<std::vector<at::Tensor>> output(1);
  for (int64_t r = 0; r < cp_; ++r) output[0].push_back(torch::empty_like(kv));
  comm_->stats().bytes_sent += kv.nbytes() * (cp_ - 1);
  WithPeer("all-gather of K/V with", (cp_rank_ + cp_ - 1) % cp_, [&] {
    comm_->Wait(comm_->cp_group().allgather(output, input));
    return 0;
  });
  return std::move(output[0]);
}

BlockOutput RingAttentionKernel::Forward(const at::Tensor& q, const at::Tensor& kv, double scale) {
  c10d::ProcessGroup& group = comm_->cp_group();
  const int next = int((cp_rank_ + 1) % cp_), prev = int((cp_rank_ + cp_ - 1) % cp_);
  BlockOutput merged{torch::zeros_like(q), torch::full({q.size(0), q.size(1), q.size(2)},
                                                       -INFINITY, q.options())};
  stats_.scores_per_step.clear();
  const std::vector<at::Tensor> gathered =
      rotate_method_ == "allgather" ? AllGatherKv(kv) : std::vector<at::Tensor>{};
  at::Tensor current = kv;
  for (int64_t step = 0; step < cp_; ++step) {
    const int64_t src = Source(step);
    c10::intrusive_ptr<c10d::Work> send, recv;
    std::vector<at::Tensor> send_buf = {current}, recv_buf;
    if (rotate_method_ == "alltoall" && step + 1 < cp_) {
      // Issue the next step's transfer before this step's compute so the two overlap.
      recv_buf = {torch::empty_like(current)};
      send = WithPeer("send of K/V to", next, [&] { return group.send(send_buf, next, kKvTag); });
      recv = WithPeer("receive of K/V from", prev,
                      [&] { return group.recv(recv_buf, prev, kKvTag); });
      comm_->stats().bytes_sent += current.nbytes();
    }
    const at::Tensor& block_kv = rotate_method_ == "allgather" ? gathered[src] : current;
    MergeBlockInto(merged.out, merged.lse, ComputeBlock(q, block_kv, src, scale));
    if (send) {
      WithPeer("receive of K/V from", prev, [&] { WaitOverlapped(*comm_, recv); return 0; });
      WithPeer("send of K/V to", next, [&] { comm_->Wait(send); return 0; });
      current = recv_buf[0];
    }
  }
  return merged;
}

std::pair<at::Tensor, at::Tensor> RingAttentionKernel::Backward(
    const at::Tensor& q, const at::Tensor& kv, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& dout, double scale) {
  c10d::ProcessGroup& group = comm_->cp_group();
  const int next = int((cp_rank_ + 1) % cp_), prev = int((cp_rank_ + cp_ - 1) % cp_);
  const at::Tensor delta = AttentionDelta(dout, out);
  at::Tensor dq = torch::zeros_like(q);

  if (rotate_method_ == "allgather") {
    const std::vector<at::Tensor> gathered = AllGatherKv(kv);
    // Slot j of dkv_all holds this rank's contribution to block j.
    at::Tensor dkv_all = torch::empty({cp_, kv.size(0), kv.size(1), kv.size(2), kv.size(3),
                                       kv.size(4)}, kv.options());
    for (int64_t step = 0; step < cp_; ++step) {
      const int64_t src = Source(step);
      BlockGrads g = ComputeBlockGrads(q, gathered[src], dout, delta, lse, src, scale);
      dq.add_(g.dq);
      dkv_all[src].copy_(torch::stack({g.dk, g.dv}));
    }
    // Reduce-scatter as one all-to-all: rank j receives every rank's contribution to block j.
    at::Tensor received = torch::empty_like(dkv_all);
    comm_->stats().bytes_sent += dkv_all.nbytes() / cp_ * (cp_ - 1);
    WithPeer("reduce-scatter of dK/dV with", prev, [&] {
      std::vector<int64_t> splits;
      comm_->Wait(group.alltoall_base(received, dkv_all, splits, splits));
      return 0;
    });
    // Sum in ring order (owner first, then r+1, r+2, …), the order the alltoall method uses.
    at::Tensor dkv = received[cp_rank_].clone();
    for (int64_t i = 1; i < cp_; ++i) dkv.add_(received[(cp_rank_ + i) % cp_]);
    return {dq, dkv};
  }

  at::Tensor current = kv;
  at::Tensor acc_in;  // the dK/dV accumulator of the block this rank holds, from prev
  c10::intrusive_ptr<c10d::Work> acc_recv;
  std::vector<c10::intrusive_ptr<c10d::Work>> acc_sends;
  std::vector<std::vector<at::Tensor>> acc_send_bufs;  // kept alive until their sends finish
  acc_send_bufs.reserve(cp_);
  for (int64_t step = 0; step < cp_; ++step) {
    const int64_t src = Source(step);
    c10::intrusive_ptr<c10d::Work> send, recv;
    std::vector<at::Tensor> send_buf = {current}, recv_buf;
    if (step + 1 < cp_) {
      recv_buf = {torch::empty_like(current)};
      send = WithPeer("send of K/V to", next, [&] { return group.send(send_buf, next, kKvTag); });
      recv = WithPeer("receive of K/V from", prev,
                      [&] { return group.recv(recv_buf, prev, kKvTag); });
      comm_->stats().bytes_sent += current.nbytes();
    }
    BlockGrads g = ComputeBlockGrads(q, current, dout, delta, lse, src, scale);
    dq.add_(g.dq);
    at::Tensor acc = torch::stack({g.dk, g.dv});
    if (step > 0) {
      WithPeer("receive of dK/dV from", prev, [&] { WaitOverlapped(*comm_, acc_recv); return 0; });
      acc = acc_in.add_(acc);  // owner's contribution first, then ring order
    }
    // The accumulator goes on to the next rank, which holds this block at the next step (or, after
    // the last step, owns it).
    acc_send_bufs.push_back({acc});
    acc_sends.push_back(WithPeer("send of dK/dV to", next,
                                 [&] { return group.send(acc_send_bufs.back(), next, kDkvTag); }));
    comm_->stats().bytes_sent += acc.nbytes();
    std::vector<at::Tensor> acc_recv_buf = {torch::empty_like(acc)};
    acc_recv = WithPeer("receive of dK/dV from", prev,
                        [&] { return group.recv(acc_recv_buf, prev, kDkvTag); });
    acc_in = acc_recv_buf[0];
    if (send) {
      WithPeer("receive of K/V from", prev, [&] { WaitOverlapped(*comm_, recv); return 0; });
      WithPeer("send of K/V to", next, [&] { comm_->Wait(send); return 0; });
      current = recv_buf[0];
    }
  }
  WithPeer("receive of dK/dV from", prev, [&] { comm_->Wait(acc_recv); return 0; });
  for (auto& w : acc_sends) WithPeer("send of dK/dV to", next, [&] { comm_->Wait(w); return 0; });
  return {dq, acc_in};
}

}  // namespace ringtrain
