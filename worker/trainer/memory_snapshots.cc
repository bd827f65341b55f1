#include "worker/trainer/memory_snapshots.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "worker/trainer/shared_floats.h"

namespace ringtrain {
namespace {

// Tags on the snapshot group: a copy is its flat state (unless shared), its generator state and
// (step, AdamW step, shared buffer or −1).
constexpr int kFlatTag = 1;
constexpr int kRngTag = 2;
constexpr int kMetaTag = 3;
// The shared-buffer handshake (ShareOnHost): the owner's offer, the buddy's answer.
constexpr int kShareOfferTag = 4;
constexpr int kShareAnswerTag = 5;
// Dropped buffers kept for reuse: a rank holds at most two of its own and two of its source's
// snapshots (the committed one and the newer being sent), so two spares cover the steady state.
constexpr size_t kSpareBuffers = 2;

// `to` = `from` (of the same sizes). Between contiguous float32 CPU tensors (every CPU rank's
// state) it is one memcpy: glibc's copy of a 1.1 GB state took 0.11 s here, ATen's copy_ 0.17 s.
void CopyState(const at::Tensor& from, const at::Tensor& to) {
  if (from.device().is_cpu() && to.device().is_cpu() && from.scalar_type() == at::kFloat &&
      to.scalar_type() == at::kFloat && from.is_contiguous() && to.is_contiguous()) {
    std::memcpy(to.data_ptr(), from.data_ptr(), size_t(to.nbytes()));
    return;
  }
  to.copy_(from);
}

}  // namespace

MemorySnapshots::MemorySnapshots(Communicator* comm, std::vector<at::Tensor> state)
    : comm_(comm), state_(std::move(state)) {
  for (const at::Tensor& t : state_) elements_ += t.numel();
}

int64_t MemorySnapshots::rng_bytes() const {
  return at::detail::getDefaultCPUGenerator().get_state().numel();
}

void MemorySnapshots::SetPeers(int64_t buddy, int64_t source, int64_t source_elements,
                               int64_t source_rng_bytes) {
  buddy_ = buddy;
  source_ = source;
  source_elements_ = source_elements;
  source_rng_bytes_ = source_rng_bytes;
}

std::vector<at::Tensor> MemorySnapshots::Stage(int64_t step) {
  Settle();
  DropStaged();  // one staged for a step that never took its snapshot
  staged_slot_ = shares_with_buddy() ? FreeSlot() : -1;
  staged_ = staged_slot_ >= 0 ? own_slots_[size_t(staged_slot_)] : NewFlat(elements_);
  staged_step_ = step;
  std::vector<at::Tensor> views;
  int64_t offset = 0;
  for (const at::Tensor& t : state_) {
    views.push_back(staged_.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
  return views;
}

void MemorySnapshots::Take(int64_t step, int64_t optimizer_step) {
  if (staged_step_ != step) {  // no update wrote the state into a buffer: the step pays the copy
    const std::vector<at::Tensor> views = Stage(step);
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < state_.size(); ++i) CopyState(state_[i].detach(), views[i]);
  }
  Settle();
  Snapshot s;
  s.step = step;
  s.optimizer_step = optimizer_step;
  s.flat = std::move(staged_);  // Take owns it now: nothing is staged
  const int64_t slot = staged_slot_;
  staged_step_ = -1;
  s.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  const at::Tensor meta = at::tensor({step, optimizer_step, slot}, at::kLong);
  own_[step] = s;

  incoming_ = Snapshot{};
  if (!shares_with_source()) incoming_.flat = NewFlat(source_elements_);
  incoming_.rng_state = at::empty({source_rng_bytes_}, at::kByte);
  incoming_.step = -1;
  CommCall("sending the step " + std::to_string(step) + " snapshot to rank " +
               std::to_string(buddy_) + " and receiving rank " + std::to_string(source_) + "'s",
           [&] {
             c10d::ProcessGroup& group = comm_->snapshot_group();
             if (slot < 0) {
               std::vector<at::Tensor> flat = {s.flat};
               works_.push_back(group.send(flat, int(buddy_), kFlatTag));
             }
             std::vector<std::vector<at::Tensor>> sends = {{s.rng_state}, {meta}};
             const int tags[] = {kRngTag, kMetaTag};
             for (size_t i = 0; i < sends.size(); ++i) {
               works_.push_back(group.send(sends[i], int(buddy_), tags[i]));
             }
             std::vector<at::Tensor> rng = {incoming_.rng_state};
             incoming_meta_ = at::empty({3}, at::kLong);
             std::vector<at::Tensor> meta_in = {incoming_meta_};
             if (!shares_with_source()) {
               std::vector<at::Tensor> flat = {incoming_.flat};
               works_.push_back(group.recv(flat, int(source_), kFlatTag));
             }
             works_.push_back(group.recv(rng, int(source_), kRngTag));
             works_.push_back(group.recv(meta_in, int(source_), kMetaTag));
           });
}

void MemorySnapshots::Settle() {
  if (works_.empty()) return;
  std::vector<c10::intrusive_ptr<c10d::Work>> works = std::move(works_);
  works_.clear();
  CommCall("the snapshot transfer with ranks " + std::to_string(buddy_) + " and " +
               std::to_string(source_),
           [&] {
             for (auto& w : works) w->wait(comm_->timeout());
           });
  incoming_.step = incoming_meta_[0].item<int64_t>();
  incoming_.optimizer_step = incoming_meta_[1].item<int64_t>();
  if (shares_with_source()) {
    const int64_t slot = incoming_meta_[2].item<int64_t>();
    if (slot < 0 || slot >= int64_t(source_slots_.size())) {
      throw CommError("rank " + std::to_string(source_) + "'s step " +
                      std::to_string(incoming_.step) + " snapshot names shared buffer " +
                      std::to_string(slot) + " of " + std::to_string(source_slots_.size()));
    }
    incoming_.flat = source_slots_[size_t(slot)];
  }
  held_[incoming_.step] = std::move(incoming_);
  incoming_ = Snapshot{};
}

void MemorySnapshots::Abandon() {
  works_.clear();
  DropStaged();
  incoming_ = Snapshot{};
}

void MemorySnapshots::Drop(std::map<int64_t, Snapshot>& snapshots,
                           std::map<int64_t, Snapshot>::iterator first,
                           std::map<int64_t, Snapshot>::iterator last) {
  for (auto it = first; it != last; ++it) Recycle(std::move(it->second.flat));
  snapshots.erase(first, last);
}

void MemorySnapshots::DropStaged() {
  staged_step_ = -1;
  Recycle(std::move(staged_));
  staged_ = at::Tensor();
}

void MemorySnapshots::Recycle(at::Tensor flat) {
  if (spare_.size() < kSpareBuffers && flat.defined() && shared_.count(flat.data_ptr()) == 0) {
    spare_.push_back(std::move(flat));
  }
}

void MemorySnapshots::Prune(int64_t committed) {
  Drop(own_, own_.begin(), own_.lower_bound(committed));
  Drop(held_, held_.begin(), held_.lower_bound(committed));
}

void MemorySnapshots::ForgetAfter(int64_t step) {
  Drop(own_, own_.upper_bound(step), own_.end());
  Drop(held_, held_.upper_bound(step), held_.end());
}

int64_t MemorySnapshots::FreeSlot() const {
  for (size_t i = 0; i < own_slots_.size(); ++i) {
    bool kept = false;
    for (const auto& [step, s] : own_) kept = kept || s.flat.data_ptr() == own_slots_[i].data_ptr();
    if (!kept) return int64_t(i);
  }
  // ShareOnHost sizes the buffers for the snapshots a rank keeps (the committed one, the one in
  // flight, and with snapshots every step the one before): more is a bug.
  throw CommError("every one of the " + std::to_string(own_slots_.size()) +
                  " shared snapshot buffers holds a kept snapshot (steps " +
                  std::to_string(own_.begin()->first) + " to " +
                  std::to_string(own_.rbegin()->first) + ")");
}

void MemorySnapshots::ShareOnHost(bool buddy_on_host, bool source_on_host, int slots, bool populate,
                                  std::string* why) {
  constexpr int kMaxSlots = 3;  // what an offer carries
  slots = std::min(slots, kMaxSlots);
  Settle();
  source_slots_.clear();
  // This rank's buffers are kept when it offers them again (a survivor after a heal: its kept
  // snapshots are in them); a new buddy opens them as the first one did.
  if (!buddy_on_host || int64_t(own_slots_.size()) != slots) {
    own_slots_.clear();
    own_fds_.clear();
  }
  if (buddy_on_host && own_slots_.empty()) {
    for (int i = 0; i < slots; ++i) {
      absl::StatusOr<SharedFloats> slot = CreateSharedFloats(elements_, populate);
      if (!slot.ok()) {
        *why = std::string(slot.status().message());
        own_slots_.clear();
        own_fds_.clear();
        break;
      }
      own_slots_.push_back(slot->floats);
      own_fds_.push_back(slot->fd);
    }
  }
  // The offer: (offered, pid, count, the fds) — the buddy opens /proc/<pid>/fd/<fd>.
  std::vector<int64_t> offer_values(3 + kMaxSlots, -1);
  offer_values[0] = own_slots_.empty() ? 0 : 1;
  offer_values[1] = getpid();
  offer_values[2] = int64_t(own_slots_.size());
  for (size_t i = 0; i < own_fds_.size(); ++i) offer_values[3 + i] = own_fds_[i];
  const at::Tensor offer = at::tensor(offer_values, at::kLong);
  const at::Tensor offered = at::zeros({3 + kMaxSlots}, at::kLong);
  const at::Tensor answer = at::zeros({1}, at::kLong);
  const at::Tensor answered = at::zeros({1}, at::kLong);
  CommCall("agreeing on shared snapshot buffers with ranks " + std::to_string(buddy_) + " and " +
               std::to_string(source_),
           [&] {
             c10d::ProcessGroup& group = comm_->snapshot_group();
             std::vector<at::Tensor> out = {offer}, in = {offered};
             auto sent = group.send(out, int(buddy_), kShareOfferTag);
             group.recv(in, int(source_), kShareOfferTag)->wait(comm_->timeout());
             sent->wait(comm_->timeout());
             const int64_t count = std::min(offered[2].item<int64_t>(), int64_t{kMaxSlots});
             if (source_on_host && offered[0].item<int64_t>() == 1) {
               for (int64_t i = 0; i < count; ++i) {
                 absl::StatusOr<at::Tensor> slot = OpenSharedFloats(
                     SharedFloatsPath(offered[1].item<int64_t>(), offered[3 + i].item<int64_t>()),
                     source_elements_);
                 if (!slot.ok()) {
                   source_slots_.clear();
                   break;
                 }
                 source_slots_.push_back(*slot);
               }
             }
             answer.fill_(source_slots_.empty() ? 0 : 1);
             std::vector<at::Tensor> reply = {answer}, replied = {answered};
             auto replied_work = group.send(reply, int(source_), kShareAnswerTag);
             group.recv(replied, int(buddy_), kShareAnswerTag)->wait(comm_->timeout());
             replied_work->wait(comm_->timeout());
           });
  if (!own_slots_.empty() && answered[0].item<int64_t>() != 1) {
    *why = "rank " + std::to_string(buddy_) + " could not open them (another host, or another " +
           "process namespace)";
    own_slots_.clear();
    own_fds_.clear();
  }
  for (const auto* slots_of : {&own_slots_, &source_slots_}) {
    for (const at::Tensor& t : *slots_of) shared_.insert(t.data_ptr());
  }
}

void MemorySnapshots::PrepareBuffers(int own) {
  std::vector<int64_t> sizes(shares_with_buddy() ? 0 : size_t(std::max(own, 0)), elements_);
  if (!shares_with_source()) sizes.insert(sizes.end(), 2, source_elements_);
  prepared_ = std::async(std::launch::async, [sizes = std::move(sizes)] {
    std::vector<at::Tensor> buffers;
    for (int64_t n : sizes) {
      at::Tensor t = at::empty({n}, at::kFloat);
      std::memset(t.data_ptr(), 0, size_t(t.nbytes()));  // not ATen's fill: no intra-op threads
      buffers.push_back(std::move(t));
    }
    return buffers;
  });
}

void MemorySnapshots::TakePrepared() {
  if (prepared_.valid()) {
    for (at::Tensor& t : prepared_.get()) spare_.push_back(std::move(t));
  }
}

int64_t MemorySnapshots::spare_bytes() {
  TakePrepared();
  int64_t total = 0;
  for (const at::Tensor& t : spare_) total += t.nbytes();
  return total;
}

at::Tensor MemorySnapshots::NewFlat(int64_t elements) {
  TakePrepared();
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    // Not one a transfer in flight still reads (Abandon leaves its tensors to Gloo).
    if (it->numel() != elements || it->use_count() != 1 || it->storage().use_count() != 1) {
      continue;
    }
    at::Tensor reused = std::move(*it);
    spare_.erase(it);
    return reused;
  }
  return at::empty({elements}, at::kFloat);
}

std::vector<int64_t> MemorySnapshots::own_steps() const {
  std::vector<int64_t> steps;
  for (const auto& [step, s] : own_) steps.push_back(step);
  return steps;
}

std::vector<int64_t> MemorySnapshots::held_steps() const {
  std::vector<int64_t> steps;
  for (const auto& [step, s] : held_) steps.push_back(step);
  return steps;
}

int64_t MemorySnapshots::newest_held_step() const {
  return held_.empty() ? 0 : held_.rbegin()->first;
}

const Snapshot* MemorySnapshots::Own(int64_t step) const {
  auto it = own_.find(step);
  return it == own_.end() ? nullptr : &it->second;
}

const Snapshot* MemorySnapshots::Held(int64_t step) const {
  auto it = held_.find(step);
  return it == held_.end() ? nullptr : &it->second;
}

void MemorySnapshots::AdoptOwn(Snapshot snapshot) {
  const int64_t step = snapshot.step;
  own_[step] = std::move(snapshot);
}

void MemorySnapshots::Restore(const Snapshot& snapshot) {
  at::NoGradGuard no_grad;
  int64_t offset = 0;
  for (at::Tensor& t : state_) {
    CopyState(snapshot.flat.narrow(0, offset, t.numel()).view(t.sizes()), t.detach());
    offset += t.numel();
  }
}

int64_t MemorySnapshots::bytes() const {
  int64_t total = 0;
  for (const auto* map : {&own_, &held_}) {
    for (const auto& [step, s] : *map) total += s.flat.nbytes() + s.rng_state.nbytes();
  }
  return total;
}

}  // namespace ringtrain
