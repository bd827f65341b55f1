#include "worker/engine/parallel/kv_exchange.h"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

constexpr int kKvTag = 1;   // K/V blocks moving forward around the ring
constexpr int kDkvTag = 2;  // dK/dV accumulators travelling home

// One c10d call whose failure names the ring peer involved.
template <typename F>
auto WithPeer(const char* what, int64_t peer, F&& f) -> decltype(f()) {
  return CommCall(absl::StrCat("ring attention: ", what, " cp rank ", peer), std::forward<F>(f));
}

// Waits for a ring receive that was overlapped with compute, recording the exposed wait.
void WaitOverlapped(Communicator& comm, const c10::intrusive_ptr<c10d::Work>& recv) {
  CommStats& stats = comm.stats();
  const double before = stats.wait_seconds;
  comm.Wait(recv);
  stats.ring_wait_seconds += stats.wait_seconds - before;
}

class RingGroup {
 public:
  explicit RingGroup(Communicator* comm)
      : comm_(comm),
        cp_(comm->mesh().cp),
        cp_rank_(comm->mesh().cp_rank()),
        next_(int((cp_rank_ + 1) % cp_)),
        prev_(int((cp_rank_ + cp_ - 1) % cp_)) {}

 protected:
  Communicator* comm_;
  int64_t cp_, cp_rank_;
  int next_, prev_;
};

class AllToAllExchange : public KvExchange, RingGroup {
 public:
  using RingGroup::RingGroup;

  void Begin(const at::Tensor& kv) override {
    current_ = kv;
    acc_in_ = at::Tensor();
    acc_recv_.reset();
    acc_sends_.clear();
    acc_send_bufs_.clear();
    acc_send_bufs_.reserve(cp_);  // the sends hold pointers into these buffers
  }

  void Prefetch(int64_t step) override {
    send_.reset();
    recv_.reset();
    if (step + 1 >= cp_) return;
    // The next step's block, issued before this step's compute so the two overlap.
    send_buf_ = {current_};
    recv_buf_ = {torch::empty_like(current_)};
    c10d::ProcessGroup& group = comm_->cp_group();
    send_ = WithPeer("send of K/V to", next_, [&] { return group.send(send_buf_, next_, kKvTag); });
    recv_ = WithPeer("receive of K/V from", prev_,
                     [&] { return group.recv(recv_buf_, prev_, kKvTag); });
    comm_->stats().bytes_sent += current_.nbytes();
  }

  const at::Tensor& Block(int64_t) override { return current_; }

  void Advance(int64_t step) override {
    if (step + 1 == cp_) {
      // The pass is over: hold no block until the next one (a forward pass ends here).
      current_ = at::Tensor();
      send_buf_.clear();
      recv_buf_.clear();
    }
    if (!send_) return;
    WithPeer("receive of K/V from", prev_, [&] { WaitOverlapped(*comm_, recv_); return 0; });
    WithPeer("send of K/V to", next_, [&] { comm_->Wait(send_); return 0; });
    current_ = recv_buf_[0];
  }

  void AddBlockGrad(int64_t step, const at::Tensor& dkv) override {
    at::Tensor acc = dkv;
    if (step > 0) {
      WithPeer("receive of dK/dV from", prev_, [&] { WaitOverlapped(*comm_, acc_recv_); return 0; });
      acc = acc_in_.add_(acc);  // the owner's contribution first, then ring order
    }
    // The accumulator goes on to the next rank, which holds this block at the next step (or,
    // after the last step, owns it).
    c10d::ProcessGroup& group = comm_->cp_group();
    acc_send_bufs_.push_back({acc});
    acc_sends_.push_back(WithPeer("send of dK/dV to", next_, [&] {
      return group.send(acc_send_bufs_.back(), next_, kDkvTag);
    }));
    comm_->stats().bytes_sent += acc.nbytes();
    std::vector<at::Tensor> recv_buf = {torch::empty_like(acc)};
    acc_recv_ = WithPeer("receive of dK/dV from", prev_,
                         [&] { return group.recv(recv_buf, prev_, kDkvTag); });
    acc_in_ = recv_buf[0];
  }

  at::Tensor FinishGrads() override {
    WithPeer("receive of dK/dV from", prev_, [&] { comm_->Wait(acc_recv_); return 0; });
    for (auto& w : acc_sends_) {
      WithPeer("send of dK/dV to", next_, [&] { comm_->Wait(w); return 0; });
    }
    acc_sends_.clear();
    acc_send_bufs_.clear();
    return acc_in_;
  }

 private:
  at::Tensor current_;  // the block held at the current step
  std::vector<at::Tensor> send_buf_, recv_buf_;
  c10::intrusive_ptr<c10d::Work> send_, recv_;
  at::Tensor acc_in_;  // the dK/dV accumulator of the block this rank holds, from prev
  c10::intrusive_ptr<c10d::Work> acc_recv_;
  std::vector<c10::intrusive_ptr<c10d::Work>> acc_sends_;
  std::vector<std::vector<at::Tensor>> acc_send_bufs_;  // kept alive until their sends finish
};

class AllGatherExchange : public KvExchange, RingGroup {
 public:
  using RingGroup::RingGroup;

  void Begin(const at::Tensor& kv) override {
    std::vector<at::Tensor> input = {kv};
    std::vector<std::vector<at::Tensor>> output(1);
    for (int64_t r = 0; r < cp_; ++r) output[0].push_back(torch::empty_like(kv));
    comm_->stats().bytes_sent += kv.nbytes() * (cp_ - 1);
    WithPeer("all-gather of K/V with", prev_, [&] {
      comm_->Wait(comm_->cp_group().allgather(output, input));
      return 0;
    });
    gathered_ = std::move(output[0]);
    dkv_all_ = at::Tensor();
  }

  void Prefetch(int64_t) override {}
  const at::Tensor& Block(int64_t step) override {
    return gathered_[RingSource(cp_rank_, cp_, step)];
  }
  void Advance(int64_t step) override {
    if (step + 1 == cp_) gathered_.clear();  // the pass is over: hold no block until the next one
  }

  void AddBlockGrad(int64_t step, const at::Tensor& dkv) override {
    if (!dkv_all_.defined()) {
      // Slot j holds this rank's contribution to block j.
      std::vector<int64_t> shape = {cp_};
      for (int64_t d : dkv.sizes()) shape.push_back(d);
      dkv_all_ = torch::empty(shape, dkv.options());
    }
    dkv_all_[RingSource(cp_rank_, cp_, step)].copy_(dkv);
  }

  at::Tensor FinishGrads() override {
    // Reduce-scatter as one all-to-all: rank j receives every rank's contribution to block j.
    at::Tensor received = torch::empty_like(dkv_all_);
    comm_->stats().bytes_sent += dkv_all_.nbytes() / cp_ * (cp_ - 1);
    WithPeer("reduce-scatter of dK/dV with", prev_, [&] {
      std::vector<int64_t> splits;
      comm_->Wait(comm_->cp_group().alltoall_base(received, dkv_all_, splits, splits));
      return 0;
    });
    // Sum in ring order (owner first, then r+1, r+2, …), the order the alltoall method uses.
    at::Tensor dkv = received[cp_rank_].clone();
    for (int64_t i = 1; i < cp_; ++i) dkv.add_(received[(cp_rank_ + i) % cp_]);
    dkv_all_ = at::Tensor();
    return dkv;
  }

 private:
  std::vector<at::Tensor> gathered_;  // every cp rank's block, by cp rank
  at::Tensor dkv_all_;                // (cp, 2, B, Hk, Lc, D)
};

}  // namespace

std::unique_ptr<KvExchange> MakeKvExchange(RotateMethod method, Communicator* comm) {
  switch (method) {
    case RotateMethod::kAllGather: return std::make_unique<AllGatherExchange>(comm);
    case RotateMethod::kAllToAll: break;
  }
  return std::make_unique<AllToAllExchange>(comm);
}

}  // namespace ringtrain
