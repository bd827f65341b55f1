#include "worker/engine/parallel/kv_exchange.h"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

constexpr int kKvTag = 1;   // K/V blocks moving forward around the ring
constexpr int kDkvTag = 2;  // dK/dV accumulators travelling home

// Waits for a ring transfer that was overlapped with compute, recording the exposed wait.
void WaitOverlapped(Communicator& comm, PendingWork& transfer) {
  CommStats& stats = comm.stats();
  const double before = stats.wait_seconds;
  comm.Wait(transfer);
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
  // "exchange of K/V (to cp rank 1, from cp rank 3)": names both peers of a ring transfer.
  std::string Exchange(const char* what) const {
    return absl::StrCat("ring attention: exchange of ", what, " (send to cp rank ", next_,
                        ", receive from cp rank ", prev_, ")");
  }

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
    acc_transfer_ = PendingWork{};
  }

  void Prefetch(int64_t step) override {
    transfer_ = PendingWork{};
    if (step + 1 >= cp_) return;
    // The next step's block, issued before this step's compute so the two overlap.
    next_block_ = torch::empty_like(current_);
    transfer_ = CommCall(Exchange("K/V"), [&] {
      return comm_->SendRecv(comm_->cp_group(), current_, next_, next_block_, prev_, kKvTag);
    });
    comm_->stats().bytes_sent += current_.nbytes();
  }

  const at::Tensor& Block(int64_t) override { return current_; }

  void Advance(int64_t step) override {
    if (transfer_.pending()) {
      CommCall(Exchange("K/V"), [&] {
        WaitOverlapped(*comm_, transfer_);
        return 0;
      });
      current_ = next_block_;
    }
    if (step + 1 == cp_) {
      // The pass is over: hold no block until the next one (a forward pass ends here).
      current_ = at::Tensor();
      next_block_ = at::Tensor();
    }
  }

  void AddBlockGrad(int64_t step, const at::Tensor& dkv) override {
    at::Tensor acc = dkv;
    if (step > 0) {
      CommCall(Exchange("dK/dV"), [&] {
        WaitOverlapped(*comm_, acc_transfer_);
        return 0;
      });
      acc = acc_in_.add_(acc);  // the owner's contribution first, then ring order
    }
    // The accumulator goes on to the next rank, which holds this block at the next step (or,
    // after the last step, owns it); the one for the block of the next step arrives from prev.
    acc_in_ = torch::empty_like(acc);
    acc_transfer_ = CommCall(Exchange("dK/dV"), [&] {
      return comm_->SendRecv(comm_->cp_group(), acc, next_, acc_in_, prev_, kDkvTag);
    });
    comm_->stats().bytes_sent += acc.nbytes();
  }

  at::Tensor FinishGrads() override {
    CommCall(Exchange("dK/dV"), [&] {
      comm_->Wait(acc_transfer_);
      return 0;
    });
    return acc_in_;
  }

 private:
  at::Tensor current_;     // the block held at the current step
  at::Tensor next_block_;  // where the next step's block arrives
  PendingWork transfer_;
  at::Tensor acc_in_;  // the dK/dV accumulator of the block this rank holds next, from prev
  PendingWork acc_transfer_;
};

class AllGatherExchange : public KvExchange, RingGroup {
 public:
  using RingGroup::RingGroup;

  void Begin(const at::Tensor& kv) override {
    std::vector<at::Tensor> gathered;
    for (int64_t r = 0; r < cp_; ++r) gathered.push_back(torch::empty_like(kv));
    comm_->stats().bytes_sent += kv.nbytes() * (cp_ - 1);
    CommCall(absl::StrCat("ring attention: all-gather of K/V with cp rank ", prev_), [&] {
      PendingWork work = comm_->AllGather(comm_->cp_group(), gathered, kv);
      comm_->Wait(work);
      return 0;
    });
    gathered_ = std::move(gathered);
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
    CommCall(absl::StrCat("ring attention: reduce-scatter of dK/dV with cp rank ", prev_), [&] {
      PendingWork work = comm_->AllToAll(comm_->cp_group(), received, dkv_all_);
      comm_->Wait(work);
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
