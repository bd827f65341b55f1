// Healing in place, the part that is arithmetic (torch-free, unit-tested without processes): after
// a lost peer, the ranks of the new generation — survivors and replacements — all-gather one
// HealRow each and every rank picks the same step to roll back to from the same rows.
#ifndef RINGTRAIN_WORKER_TRAINER_HEAL_PLAN_H_
#define RINGTRAIN_WORKER_TRAINER_HEAL_PLAN_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"

namespace ringtrain {

// At most this many snapshots of each kind are reported (memory_snapshots.h keeps fewer).
inline constexpr int kMaxHealSteps = 4;

// What one rank brings to a heal.
struct HealRow {
  bool survivor = false;     // it kept its process (and its own snapshots); false: a replacement
  double flat_elements = 0;  // its snapshot's sizes (the same for a replacement as for the lost)
  double rng_bytes = 0;
  std::vector<int64_t> own_steps;   // steps of its own snapshots
  std::vector<int64_t> held_steps;  // steps of its source rank's copies it holds
  // The run's checkpoint save tag (rank 0's pid and start time; trainer.cc's AgreeOnSaveTag),
  // which a replacement adopts.
  double tag_pid = 0, tag_ms = 0;
  // The run's buddy offset (SnapshotOffset, chosen at its start); a replacement brings 0 and
  // adopts the survivors'.
  int64_t buddy_offset = 0;
  // Its host (heal.cc's HostId, 48 bits): buddies on one host share their snapshot buffers.
  double host_id = 0;
};

// Fixed length, for an all-gather of equal-length vectors; and back (INVALID_ARGUMENT when the
// length is wrong).
std::vector<double> HealRowToDoubles(const HealRow& row);
absl::StatusOr<HealRow> HealRowFromDoubles(const std::vector<double>& values);

// The survivors' buddy offset; nullopt when no rank survived.
std::optional<int64_t> RunBuddyOffset(const std::vector<HealRow>& rows);

// The newest step every rank can restore: each survivor from its own snapshot, each replacement
// from the copy its buddy (SnapshotBuddy with the run's `offset`) holds — a survivor. nullopt when
// there is none: no snapshot yet, or a replacement whose buddy was lost too.
std::optional<int64_t> ChooseRollbackStep(const std::vector<HealRow>& rows, int64_t offset);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_HEAL_PLAN_H_
