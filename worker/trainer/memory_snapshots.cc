#include "worker/trainer/memory_snapshots.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace ringtrain {
namespace {

// Tags on the snapshot group: a copy is its flat state, its generator state and (step, AdamW step).
constexpr int kFlatTag = 1;
constexpr int kRngTag = 2;
constexpr int kMetaTag = 3;
// Dropped buffers kept for reuse: a rank holds at most two of its own and two of its source's
// snapshots (the committed one and the newer being sent), so two spares cover the steady state.
constexpr size_t kSpareBuffers = 2;

// Moves the flat buffers of `snapshots`' entries in [first, last) to `spare` (up to its bound) and
// erases the entries.
void DropInto(std::map<int64_t, Snapshot>& snapshots, std::map<int64_t, Snapshot>::iterator first,
              std::map<int64_t, Snapshot>::iterator last, std::vector<at::Tensor>& spare) {
  for (auto it = first; it != last; ++it) {
    if (spare.size() < kSpareBuffers && it->second.flat.defined()) {
      spare.push_back(std::move(it->second.flat));
    }
  }
  snapshots.erase(first, last);
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

void MemorySnapshots::Take(int64_t step, int64_t optimizer_step) {
  Settle();
  Snapshot s;
  s.step = step;
  s.optimizer_step = optimizer_step;
  s.flat = NewFlat(elements_);
  {
    at::NoGradGuard no_grad;
    int64_t offset = 0;
    for (const at::Tensor& t : state_) {
      s.flat.narrow(0, offset, t.numel()).copy_(t.detach().reshape(-1));
      offset += t.numel();
    }
  }
  s.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  const at::Tensor meta = at::tensor({step, optimizer_step}, at::kLong);
  own_[step] = s;

  incoming_ = Snapshot{};
  incoming_.flat = NewFlat(source_elements_);
  incoming_.rng_state = at::empty({source_rng_bytes_}, at::kByte);
  incoming_.step = -1;
  CommCall("sending the step " + std::to_string(step) + " snapshot to rank " +
               std::to_string(buddy_) + " and receiving rank " + std::to_string(source_) + "'s",
           [&] {
             c10d::ProcessGroup& group = comm_->snapshot_group();
             std::vector<std::vector<at::Tensor>> sends = {{s.flat}, {s.rng_state}, {meta}};
             const int tags[] = {kFlatTag, kRngTag, kMetaTag};
             for (size_t i = 0; i < sends.size(); ++i) {
               works_.push_back(group.send(sends[i], int(buddy_), tags[i]));
             }
             std::vector<at::Tensor> flat = {incoming_.flat};
             std::vector<at::Tensor> rng = {incoming_.rng_state};
             incoming_meta_ = at::empty({2}, at::kLong);
             std::vector<at::Tensor> meta_in = {incoming_meta_};
             works_.push_back(group.recv(flat, int(source_), kFlatTag));
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
  held_[incoming_.step] = std::move(incoming_);
  incoming_ = Snapshot{};
}

void MemorySnapshots::Abandon() {
  works_.clear();
  incoming_ = Snapshot{};
}

void MemorySnapshots::Prune(int64_t committed) {
  DropInto(own_, own_.begin(), own_.lower_bound(committed), spare_);
  DropInto(held_, held_.begin(), held_.lower_bound(committed), spare_);
}

void MemorySnapshots::ForgetAfter(int64_t step) {
  DropInto(own_, own_.upper_bound(step), own_.end(), spare_);
  DropInto(held_, held_.upper_bound(step), held_.end(), spare_);
}

void MemorySnapshots::PrepareBuffers(int own) {
  std::vector<int64_t> sizes(size_t(std::max(own, 0)), elements_);
  sizes.insert(sizes.end(), 2, source_elements_);
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
    t.detach().copy_(snapshot.flat.narrow(0, offset, t.numel()).view(t.sizes()));
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
