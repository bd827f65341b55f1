#include "coordinator/heal_policy.h"

#include "absl/strings/str_cat.h"
#include "common/record/heal_instruction.h"

namespace ringtrain {

HealDecision DecideHeal(const HealInputs& in) {
  HealDecision d;
  const auto no = [&](std::string why) {
    d.why_not = std::move(why);
    return d;
  };
  if (in.memory_interval <= 0) return no("in-memory snapshots are off");
  if (in.world <= 1 || in.lost_rank < 0) return no("no single lost rank to replace");
  if (!in.running) return no("the run had not started every rank");
  if (!in.restarts_left) return no("no restarts left");
  if (in.healing) return no("the previous heal in place has not trained a step yet");
  if (in.snapshot_step <= 0 || in.buddy_offset <= 0) return no("no in-memory snapshot yet");
  const int buddy = int(SnapshotBuddy(in.lost_rank, in.world, in.buddy_offset));
  if (in.also_gone.count(buddy) != 0) {
    return no(absl::StrCat("rank ", in.lost_rank, "'s buddy, rank ", buddy,
                           ", which holds its snapshot, is gone too"));
  }
  if (!in.also_gone.empty()) {
    return no(absl::StrCat("rank ", *in.also_gone.begin(), " is gone too"));
  }
  for (const std::string& id : in.idle_workers) {
    if (id != in.lost_worker_id) {
      d.heal = true;
      d.replacement_worker_id = id;
      return d;
    }
  }
  for (const std::string& id : in.idle_workers) {
    d.heal = true;
    d.replacement_worker_id = id;
    return d;
  }
  return no("no idle worker to take the rank");
}

}  // namespace ringtrain
