#include "worker/engine/parallel/kv_exchange.h"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

constexpr int kKvTag = 1;   // K/V blocks moving forward around the ring
constexpr int kDkvTag = 2;  // dK/dV accumulators travelling home

// A point of the ring loop that may wait: waits for `transfer` (when one is pending), recording
// the wait as exposed ring time (CommStats::ring_wait_seconds: what compute did not hide of an
// overlapped transfer, or all of one that nothing overlaps) and as the point's entry in
// CommStats::ring_waits (0 when nothing was pending).
void WaitRing(Communicator& comm, PendingWork& transfer) {
  CommStats& stats = comm.stats();
  const double before = stats.wait_seconds;
  if (transfer.pending()) comm.Wait(transfer);
  const double waited = stats.wait_seconds - before;
  stats.ring_wait_seconds += waited;
  stats.ring_waits.push_back(waited);
}

class RingGroup {
 public:
  RingGroup(Communicator* comm, const RingMembers& ring)
      : comm_(comm),
        ring_(ring),
        ring_size_(ring.size),
        ring_rank_(ring.rank),
        next_(int((ring_rank_ + 1) % ring_size_)),
        prev_(int((ring_rank_ + ring_size_ - 1) % ring_size_)) {}

 protected:
  // "exchange of K/V (to cp rank 1, from cp rank 3)": names both peers of a ring transfer.
  std::string Exchange(const char* what) const {
    return absl::StrCat("ring attention: exchange of ", what, " (send to ", ring_.member, " ",
                        next_, ", receive from ", ring_.member, " ", prev_, ")");
  }
  // A K/V block or a dK/dV accumulator sent: into the communicator's figures.
  void CountSent(const at::Tensor& t, bool kv_block) const {
    CommStats& stats = comm_->stats();
    stats.bytes_sent += t.nbytes();
    stats.ring_bytes_sent += t.nbytes();
    stats.kv_blocks_sent += kv_block ? 1 : 0;
  }
  int64_t Mod(int64_t r) const { return ((r % ring_size_) + ring_size_) % ring_size_; }
  bool Needs(int64_t dst, int64_t src) const {
    return (*needs_)[size_t(Mod(dst))][size_t(Mod(src))];
  }
  // Whether block `src`, at rank src + step after step `step`, must go on to the next rank: some
  // rank further round still needs it.
  bool GoesOn(int64_t src, int64_t step) const {
    for (int64_t j = step + 1; j < ring_size_; ++j) {
      if (Needs(src + j, src)) return true;
    }
    return false;
  }

  Communicator* comm_;
  RingMembers ring_;
  int64_t ring_size_, ring_rank_;
  int next_, prev_;
  BlockNeeds needs_storage_;
  const BlockNeeds* needs_ = &needs_storage_;
};

class AllToAllExchange : public KvExchange, RingGroup {
 public:
  using RingGroup::RingGroup;

  void Begin(const at::Tensor& kv, const BlockNeeds& needs) override {
    needs_storage_ = needs;
    current_ = kv;
    shape_ = kv;
    own_ = at::Tensor();
    acc_in_ = at::Tensor();
    acc_transfer_ = PendingWork{};
  }

  void Prefetch(int64_t step) override {
    transfer_ = PendingWork{};
    next_block_ = at::Tensor();
    if (step + 1 >= ring_size_) return;
    // The next step's block, issued before this step's compute so the two overlap; a block goes
    // on only while a rank further round needs it.
    std::vector<std::pair<at::Tensor, int>> sends;
    std::vector<std::pair<at::Tensor*, int>> recvs;
    if (GoesOn(ring_rank_ - step, step)) {
      sends.push_back({current_, next_});
      CountSent(current_, /*kv_block=*/true);
    }
    if (GoesOn(ring_rank_ - step - 1, step)) {
      next_block_ = torch::empty_like(shape_);
      recvs.push_back({&next_block_, prev_});
    }
    transfer_ = CommCall(Exchange("K/V"), [&] {
      return comm_->Exchange((comm_->*ring_.group)(), sends, recvs, kKvTag);
    });
  }

  const at::Tensor& Block(int64_t) override { return current_; }

  void Advance(int64_t step) override {
    CommCall(Exchange("K/V"), [&] {
      WaitRing(*comm_, transfer_);
      return 0;
    });
    current_ = next_block_;
    if (step + 1 == ring_size_) {
      // The pass is over: hold no block until the next one (a forward pass ends here).
      current_ = at::Tensor();
      next_block_ = at::Tensor();
      shape_ = at::Tensor();
    }
  }

  void AddBlockGrad(int64_t step, const at::Tensor& dkv) override {
    const int64_t src = ring_rank_ - step;  // the block held at this step
    CommCall(Exchange("dK/dV"), [&] {
      WaitRing(*comm_, acc_transfer_);
      return 0;
    });
    // A block's accumulator goes round the ring (to arrive home after the last step) only when
    // some other rank needed the block.
    const bool travels = GoesOn(src, 0);
    at::Tensor acc;
    if (step == 0) {
      own_ = dkv;
      acc = dkv;
    } else if (travels) {
      acc = dkv.defined() ? acc_in_.add_(dkv) : acc_in_;  // the owner's first, then ring order
    }
    std::vector<std::pair<at::Tensor, int>> sends;
    std::vector<std::pair<at::Tensor*, int>> recvs;
    if (travels) {
      sends.push_back({acc, next_});
      CountSent(acc, /*kv_block=*/false);
    }
    // The accumulator of the block this rank holds next (or, after the last step, its own).
    acc_in_ = at::Tensor();
    if (GoesOn(src - 1, 0)) {
      acc_in_ = torch::empty_like(own_);
      recvs.push_back({&acc_in_, prev_});
    }
    acc_transfer_ = CommCall(Exchange("dK/dV"), [&] {
      return comm_->Exchange((comm_->*ring_.group)(), sends, recvs, kDkvTag);
    });
  }

  at::Tensor FinishGrads(const at::Tensor& own_rest) override {
    CommCall(Exchange("dK/dV"), [&] {
      WaitRing(*comm_, acc_transfer_);
      return 0;
    });
    at::Tensor dkv = GoesOn(ring_rank_, 0) ? acc_in_ : own_;
    return own_rest.defined() ? dkv.add(own_rest) : dkv;
  }

 private:
  at::Tensor current_;     // the block held at the current step (undefined: not here)
  at::Tensor next_block_;  // where the next step's block arrives
  at::Tensor shape_;       // this pass's own block: the shape of the blocks to receive
  PendingWork transfer_;
  at::Tensor own_;     // backward: this rank's contribution to its own block
  at::Tensor acc_in_;  // the dK/dV accumulator of the block this rank holds next, from prev
  PendingWork acc_transfer_;
};

class AllGatherExchange : public KvExchange, RingGroup {
 public:
  using RingGroup::RingGroup;

  // Each block goes to the ranks that need it, point to point.
  void Begin(const at::Tensor& kv, const BlockNeeds& needs) override {
    needs_storage_ = needs;
    std::vector<at::Tensor> gathered(static_cast<size_t>(ring_size_));
    std::vector<std::pair<at::Tensor, int>> sends;
    std::vector<std::pair<at::Tensor*, int>> recvs;
    gathered[size_t(ring_rank_)] = kv;
    for (int64_t r = 0; r < ring_size_; ++r) {
      if (r == ring_rank_) continue;
      if (Needs(r, ring_rank_)) {
        sends.push_back({kv, int(r)});
        CountSent(kv, /*kv_block=*/true);
      }
      if (Needs(ring_rank_, r)) gathered[size_t(r)] = torch::empty_like(kv);
    }
    for (int64_t r = 0; r < ring_size_; ++r) {
      if (r != ring_rank_ && gathered[size_t(r)].defined())
        recvs.push_back({&gathered[size_t(r)], int(r)});
    }
    CommCall(absl::StrCat("ring attention: all-gather of K/V with ", ring_.member, " ", prev_),
             [&] {
               PendingWork work = comm_->Exchange((comm_->*ring_.group)(), sends, recvs, kKvTag);
               WaitRing(*comm_, work);
               return 0;
             });
    gathered_ = std::move(gathered);
    contributions_.assign(size_t(ring_size_), at::Tensor());
  }

  void Prefetch(int64_t) override {}
  const at::Tensor& Block(int64_t step) override {
    return gathered_[size_t(RingSource(ring_rank_, ring_size_, step))];
  }
  void Advance(int64_t step) override {
    if (step + 1 == ring_size_)
      gathered_.clear();  // the pass is over: hold no block until the next one
  }

  void AddBlockGrad(int64_t step, const at::Tensor& dkv) override {
    contributions_[size_t(RingSource(ring_rank_, ring_size_, step))] = dkv;
  }

  at::Tensor FinishGrads(const at::Tensor& own_rest) override {
    // Each contribution to its block's owner; from each rank that needed this rank's block, its.
    const at::Tensor& own = contributions_[size_t(ring_rank_)];
    std::vector<at::Tensor> received(static_cast<size_t>(ring_size_));
    std::vector<std::pair<at::Tensor, int>> sends;
    std::vector<std::pair<at::Tensor*, int>> recvs;
    for (int64_t r = 0; r < ring_size_; ++r) {
      if (r == ring_rank_) continue;
      if (contributions_[size_t(r)].defined()) {
        sends.push_back({contributions_[size_t(r)], int(r)});
        CountSent(contributions_[size_t(r)], /*kv_block=*/false);
      }
      if (Needs(r, ring_rank_)) received[size_t(r)] = torch::empty_like(own);
    }
    for (int64_t r = 0; r < ring_size_; ++r) {
      if (r != ring_rank_ && received[size_t(r)].defined())
        recvs.push_back({&received[size_t(r)], int(r)});
    }
    CommCall(
        absl::StrCat("ring attention: reduce-scatter of dK/dV with ", ring_.member, " ", prev_),
        [&] {
          PendingWork work = comm_->Exchange((comm_->*ring_.group)(), sends, recvs, kDkvTag);
          WaitRing(*comm_, work);
          return 0;
        });
    // Sum in ring order (owner first, then r+1, r+2, …, then the owner's rest), the order the
    // alltoall method uses.
    at::Tensor dkv = own.clone();
    for (int64_t i = 1; i < ring_size_; ++i) {
      const at::Tensor& part = received[size_t((ring_rank_ + i) % ring_size_)];
      if (part.defined()) dkv.add_(part);
    }
    if (own_rest.defined()) dkv.add_(own_rest);
    contributions_.clear();
    return dkv;
  }

 private:
  std::vector<at::Tensor> gathered_;       // by ring rank: the blocks this rank needs
  std::vector<at::Tensor> contributions_;  // by ring rank: this rank's dK/dV of that block
};

}  // namespace

RingMembers RingMembers::Of(Communicator& comm) {
  const Mesh& mesh = comm.mesh();
  if (mesh.ulysses <= 1) {
    return RingMembers{&Communicator::cp_group, mesh.cp, mesh.cp_rank(), "cp rank"};
  }
  return RingMembers{&Communicator::ring_group, mesh.ring(), mesh.ring_rank(), "ring rank"};
}

double ExposedRingTransfer(Communicator& comm) {
  const RingMembers ring = RingMembers::Of(comm);
  // Every member holds the same points, so all skip the collective together when there are none.
  if (ring.size <= 1 || comm.stats().ring_waits.empty()) return 0;
  double sum = 0;
  for (double least : comm.MinOver((comm.*ring.group)(), comm.stats().ring_waits)) sum += least;
  return sum;
}

std::unique_ptr<KvExchange> MakeKvExchange(RotateMethod method, Communicator* comm,
                                           const RingMembers& ring) {
  switch (method) {
    case RotateMethod::kAllGather: return std::make_unique<AllGatherExchange>(comm, ring);
    case RotateMethod::kAllToAll: break;
  }
  return std::make_unique<AllToAllExchange>(comm, ring);
}

}  // namespace ringtrain
