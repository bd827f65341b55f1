// In-memory snapshots (checkpoint.memory_interval = K): every K steps this rank copies its whole
// training state — the tensors GradientPath::StateTensors lists, flattened into one float32 host
// buffer, with AdamW's step count and the CPU generator's state — and sends the copy to its buddy
// rank (SnapshotBuddy, on another worker) while it receives its source rank's copy. A lost rank is
// then healed in place (heal.h): the survivors roll back to a snapshot step from their own copies
// and the replacement takes its copy from the buddy, with no storage involved.
//
// The step pays only the copy into the host buffer (buffers are reused: NewFlat), and where the
// optimizer can write it (Stage: float32 CPU state) not even that: AdamW's update writes the new
// state into the buffer in the same pass that writes it in place, so the snapshot costs its
// stores, not a second read and write of the whole state. The transfer is
// issued on the communicator's snapshot group (Gloo, its own connections) and runs in Gloo's
// threads during the next step, whose end waits for it (Settle) so that the step's gathered figures
// can say which copies every rank holds. A buddy on the same host maps this rank's snapshot
// buffers instead (ShareOnHost, shared_floats.h): the copy into the buffer is then the buddy's copy
// too, and only the generator state and the step numbers travel; the send, the receive and the
// buddy's buffers are gone. Snapshots are kept until a newer step is committed: held
// by every rank for its source (RankFigures::snapshot_held_step; the minimum over the ranks is the
// record's snapshot_step), which every rank computes from the same gathered figures.
//
// Used from the training thread only.
#ifndef RINGTRAIN_WORKER_TRAINER_MEMORY_SNAPSHOTS_H_
#define RINGTRAIN_WORKER_TRAINER_MEMORY_SNAPSHOTS_H_

#include <torch/torch.h>

#include <cstdint>
#include <future>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "worker/engine/parallel/comm.h"

namespace ringtrain {

struct Snapshot {
  int64_t step = 0;            // steps completed when it was taken
  int64_t optimizer_step = 0;  // AdamW's step count then
  at::Tensor flat;             // float32 on the host: every state tensor, flattened, in order
  at::Tensor rng_state;        // uint8: the CPU generator's state
};

class MemorySnapshots {
 public:
  // `comm` (built with its snapshot group) must outlive this; `state` are the live tensors
  // (GradientPath::StateTensors) a snapshot copies and Restore writes back.
  // SetPeers must come before the first Take.
  MemorySnapshots(Communicator* comm, std::vector<at::Tensor> state);

  // Before the optimizer update of a step Take will follow: picks the next snapshot's buffer and
  // returns views of it shaped as the state tensors, in their order, for the update to write the
  // new state into (GradientPath::Step's copies). Settles a transfer still in flight first.
  std::vector<at::Tensor> Stage(int64_t step);
  // Copies the state into a new snapshot of `step` (the step pays this copy; not when Stage gave
  // the buffer for this step, which then holds it already) and issues its
  // transfer: to the buddy, and the source's copy of the same step from it, whose sizes
  // SetPeers gave. Every rank calls it at the same steps. Settles a transfer still in flight
  // first. Throws CommError.
  void Take(int64_t step, int64_t optimizer_step);
  // Waits for the transfer Take issued, if any; the received copy is then held. Throws CommError.
  void Settle();
  // Forgets a transfer in flight without waiting (its group is gone: a heal rebuilds it).
  void Abandon();
  // Keeps only snapshots of `committed` and newer (own and held).
  void Prune(int64_t committed);
  // Forgets own and held snapshots newer than `step` (after rolling back to it).
  void ForgetAfter(int64_t step);

  // The rank copies go to, the rank whose copies this one holds (heal_instruction.h's
  // SnapshotBuddy and SnapshotSource), and the sizes of the source's snapshot.
  void SetPeers(int64_t buddy, int64_t source, int64_t source_elements, int64_t source_rng_bytes);
  // After SetPeers (and again after every heal), every rank at the same point: offers the buddy
  // `slots` (at most 3) shared buffers of this rank's size when `buddy_on_host` — the ones it has
  // when it has that many, else new ones — (2 suffice when snapshots are at least 2 steps apart,
  // 3 otherwise), and maps the source's when `source_on_host` and the source offers them. A pair
  // whose buffers cannot be created or opened (another process namespace, no memory) keeps the
  // network; `why` says why when this rank's offer failed. Throws CommError.
  // `populate`: new buffers' pages are mapped in now (CreateSharedFloats), not by the first
  // snapshots' copies.
  void ShareOnHost(bool buddy_on_host, bool source_on_host, int slots, bool populate,
                   std::string* why);
  bool shares_with_buddy() const { return !own_slots_.empty(); }
  bool shares_with_source() const { return !source_slots_.empty(); }
  int64_t elements() const { return elements_; }
  int64_t rng_bytes() const;

  std::vector<int64_t> own_steps() const;
  std::vector<int64_t> held_steps() const;
  int64_t newest_held_step() const;  // 0 when none
  // nullptr when there is none of that step.
  const Snapshot* Own(int64_t step) const;
  const Snapshot* Held(int64_t step) const;
  // A snapshot of this rank's state received from its buddy (a replacement's): kept as its own.
  void AdoptOwn(Snapshot snapshot);

  // Starts writing, on a thread of its own, the buffers the next two snapshots take: `own` of this
  // rank's size (2 at a normal start; 1 for a replacement, which holds the copy it received) and
  // two of its source's; none for a side that is shared (ShareOnHost, before this). Their pages are
  // touched while the next K steps run, not by the snapshot's copy and transfer (see NewFlat).
  // After SetPeers, once.
  void PrepareBuffers(int own = 2);
  // A float32 host buffer of `elements` for a snapshot: a dropped snapshot's buffer when one of
  // that size is free, else new memory. Reuse matters: a new 1 GB buffer is mapped fresh, and its
  // first touch (by the copy, or by Gloo receiving into it) faults on every page — on this
  // project's 2-core VM that made a snapshot's two steps 7 s slower instead of 0.8 s.
  at::Tensor NewFlat(int64_t elements);

  // Writes `snapshot` into the live state tensors (and nothing else: the caller sets the step,
  // the optimizer's count and the generator).
  void Restore(const Snapshot& snapshot);
  // Host bytes held by snapshots, own and held.
  int64_t bytes() const;
  // Host bytes of the buffers kept for NewFlat (prepared or dropped), once the preparation is done.
  int64_t spare_bytes();

 private:
  // Moves the prepared buffers, once written, to spare_.
  void TakePrepared();
  // Moves the flat buffers of `snapshots`' entries before `last` or after `first` to spare_ (up to
  // its bound; never a shared one) and erases the entries.
  void Drop(std::map<int64_t, Snapshot>& snapshots, std::map<int64_t, Snapshot>::iterator first,
            std::map<int64_t, Snapshot>::iterator last);
  // Keeps `flat` in spare_ for NewFlat (up to its bound; never a shared one).
  void Recycle(at::Tensor flat);
  // Forgets the buffer Stage gave, keeping it for NewFlat.
  void DropStaged();
  // The index of an own shared buffer no kept snapshot is in.
  int64_t FreeSlot() const;

  Communicator* comm_;
  std::vector<at::Tensor> state_;
  int64_t elements_ = 0;
  int64_t buddy_ = -1, source_ = -1;
  int64_t source_elements_ = -1, source_rng_bytes_ = -1;
  std::map<int64_t, Snapshot> own_, held_;
  // Buffers of dropped snapshots, for NewFlat (at most kSpareBuffers), and those PrepareBuffers is
  // writing.
  std::vector<at::Tensor> spare_;
  std::future<std::vector<at::Tensor>> prepared_;
  // Shared buffers (ShareOnHost): this rank's, which its buddy maps, and its source's, mapped
  // read-only; `shared_` every one's address ever, so that none is taken for a received copy.
  std::vector<at::Tensor> own_slots_, source_slots_;
  std::vector<int64_t> own_fds_;  // own_slots_' memfds, which the buddy opens (SharedFloatsPath)
  std::set<const void*> shared_;
  // The transfer in flight: its works and the copy being received.
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  Snapshot incoming_;
  at::Tensor incoming_meta_;  // (step, AdamW step, shared buffer or −1) of the copy being received
  // The buffer Stage gave (its step, and its shared buffer's index or −1) until Take uses it.
  int64_t staged_step_ = -1, staged_slot_ = -1;
  at::Tensor staged_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_MEMORY_SNAPSHOTS_H_
