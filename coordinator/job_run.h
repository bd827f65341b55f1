// One run of a job: which worker holds which rank, where the ranks meet, and what each rank has
// done so far. A plain value; the Cluster keeps one per job with ranks (coordinator/cluster.h) and
// starts a fresh one for every run (a restart is a new run with the next attempt number).
#ifndef RINGTRAIN_COORDINATOR_JOB_RUN_H_
#define RINGTRAIN_COORDINATOR_JOB_RUN_H_

#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/job.h"

namespace ringtrain {

struct JobRun {
  int attempt = 0;                  // JobRecord::restart_count of this run
  std::vector<RankPlacement> mesh;  // rank r is mesh[r]
  // Rank 0's rendezvous; master_addr is empty for a run found running after a coordinator restart
  // (its ranks all started before it: no Assignment is sent again).
  std::string master_addr;
  int master_port = 0;
  std::set<int> started;
  std::set<int> exited_ok;
  std::set<int> exited;  // with any status, or given up (its worker is gone)
  // When it was assigned (or found ASSIGNED after a coordinator restart): its ranks must start
  // within the start timeout.
  absl::Time assigned_at;
  // Found running after a coordinator restart: waiting until adopt_deadline for every rank's agent
  // to register again naming it.
  bool adopting = false;
  absl::Time adopt_deadline;
  std::set<int> adopted;
  // Healing in place: 0 at the run's start, n after its n-th heal (the trainers' world
  // generation; step records carry it).
  int64_t heal_generation = 0;

  int size() const { return static_cast<int>(mesh.size()); }
  bool HasRank(int rank) const { return rank >= 0 && rank < size(); }
  bool AllStarted() const { return static_cast<int>(started.size()) == size(); }
  bool AllExitedOk() const { return static_cast<int>(exited_ok.size()) == size(); }
  bool AllExited() const { return static_cast<int>(exited.size()) >= size(); }
  int StillRunning() const { return size() - static_cast<int>(exited.size()); }
  bool AllAdopted() const { return static_cast<int>(adopted.size()) == size(); }
  // Every rank adopted or known to have exited: who lives is known.
  bool AllBack() const {
    for (int r = 0; r < size(); ++r) {
      if (adopted.count(r) == 0 && exited.count(r) == 0) return false;
    }
    return true;
  }
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_JOB_RUN_H_
