// Healing in place (checkpoint.memory_interval > 0): what a rank does when a peer is lost, and what
// a replacement does when it starts. Internal to the trainer (train_loop.cc calls it).
//
//   survivor     a collective failed → wait for the agent's heal instruction
//                ($RINGTRAIN_CONTROL_FILE, common/record/heal_instruction.h) → rendezvous again at
//                its address (Communicator::Rejoin, the same process) → agree → restore
//   replacement  started with RINGTRAIN_HEAL_GENERATION = n → joins generation n as at any start
//                → agree → receive its snapshot from its buddy → restore
//   agree        every rank all-gathers a HealRow (heal_plan.h) and rolls back to the newest step
//                every rank can restore; the buddies send the replacements their copies.
#ifndef RINGTRAIN_WORKER_TRAINER_HEAL_H_
#define RINGTRAIN_WORKER_TRAINER_HEAL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/trainer/trainer_state.h"

namespace ringtrain::trainer_internal {

// The snapshots when checkpoint.memory_interval > 0 and the world has several ranks; a normal
// start also all-gathers their sizes (a collective: every rank calls it at start).
absl::Status StartSnapshots(Trainer::State& s);

// Whether a snapshot is taken after step `step` (snapshots on, every memory_interval steps, not
// after the last).
bool SnapshotDue(const Trainer::State& s, int64_t step);

// Before step `step`'s update, when a snapshot is due: where the update also writes the state
// (MemorySnapshots::Stage); empty otherwise.
std::vector<at::Tensor> StageSnapshot(Trainer::State& s, int64_t step);

// After step `step`'s update: settles the previous transfer and takes a snapshot when one is due.
absl::Status MaybeSnapshot(Trainer::State& s, int64_t step);

// A survivor after `failure`: heals in place when it can (snapshots on, a lost peer, an
// instruction within the wait) and returns the step it rolled back to; otherwise `failure`
// (with why it did not heal appended when it waited).
absl::StatusOr<int64_t> HealInPlace(Trainer::State& s, const absl::Status& failure);

// Whether a survivor's heal instruction (a newer generation) is in the control file: the
// coordinator already knows a peer was lost.
bool HealInstructionCame(const Trainer::State& s);

// A replacement (rank.heal_generation > 0), after Create: the step it starts after.
absl::StatusOr<int64_t> JoinAsReplacement(Trainer::State& s);

}  // namespace ringtrain::trainer_internal

#endif  // RINGTRAIN_WORKER_TRAINER_HEAL_H_
