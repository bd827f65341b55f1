// Whether a lost rank is healed in place (checkpoint.memory_interval: the replacement takes the
// rank's state from its buddy's memory, the other ranks keep their processes and roll back) or
// the job falls back to a restart from storage — a pure function of what the coordinator knows,
// unit-tested without a cluster. The Cluster carries the decision out (cluster_heals.cc).
#ifndef RINGTRAIN_COORDINATOR_HEAL_POLICY_H_
#define RINGTRAIN_COORDINATOR_HEAL_POLICY_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace ringtrain {

struct HealInputs {
  int64_t memory_interval = 0;  // the job's checkpoint.memory_interval (0: snapshots off)
  int64_t snapshot_step = 0;    // the newest step every rank's state is in two memories (records)
  bool running = false;         // the run is RUNNING (every rank started)
  bool restarts_left = false;   // job.max_restarts allows another recovery
  bool healing = false;         // an earlier heal has not trained a step yet
  int lost_rank = -1;
  std::string lost_worker_id;
  int64_t world = 1;
  int64_t buddy_offset = 0;  // the records' snapshot_buddy_offset (0: not reported yet)
  // Ranks other than the lost one whose trainers are gone too (exited, or their worker lost).
  std::set<int> also_gone;
  // Idle, connected workers of the job's device kind, in the order to try (the lost rank's own
  // worker, if idle again, among them).
  std::vector<std::string> idle_workers;
};

struct HealDecision {
  bool heal = false;
  std::string replacement_worker_id;
  std::string why_not;  // when !heal: why it restarts from storage instead (for the log)
};

// Heals when snapshots are on, one exists, the run is RUNNING with restarts left, only the one
// rank is gone and its buddy (SnapshotBuddy with the trainers' offset) still runs, and a
// replacement is idle — another worker than the lost one when there is one.
HealDecision DecideHeal(const HealInputs& in);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_HEAL_POLICY_H_
