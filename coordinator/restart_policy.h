// The restart policy: whether a failed run of a job restarts and when, what holds a restarting job
// back, and the final error of a job that fails for good. Pure: a function of the job's record,
// the failure's cause and the time it is given, with no lock, store, clock or thread; the Cluster
// applies the decision (coordinator/cluster.h).
//
// A run fails on its cause (JobError::cause, one of job.h's kCause*). The job restarts while it has
// restarts left ([job] max_restarts) and the cause is one a restart can help; a trainer that
// rejected its config (kTrainerExitRejected) would reject it again, so that fails at once.
#ifndef RINGTRAIN_COORDINATOR_RESTART_POLICY_H_
#define RINGTRAIN_COORDINATOR_RESTART_POLICY_H_

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "coordinator/job.h"

namespace ringtrain {

struct RestartDecision {
  // true: RESTARTING, the next run at restart_at at the earliest; false: FAILED with `error`.
  bool restart = false;
  absl::Time restart_at;
  std::string wait_reason;  // restart: "restart 1 of 3: stopping the failed run's ranks"
  std::string message;      // the state change's message (to RESTARTING or to FAILED)
  JobError error;           // fail: the job's final error (the cause, why no restart, the history)
};

// What job.max_restarts has been used for so far: restarts from storage and heals in place.
int RestartsUsed(const JobRecord& job);
// Heals in place of the job's current run (those after its last restart): the generation its
// trainers' world is in.
int HealsOfThisRun(const JobRecord& job);

class RestartPolicy {
 public:
  // The decision for `job`'s current run failing with `cause` at `now`. `job` is the stored record
  // with `cause` already last in job.failures; restart_count is the restarts so far.
  static RestartDecision Decide(const JobRecord& job, const JobError& cause, absl::Time now);

  // The final error of a job that fails for good with `cause` (last in job.failures): the cause,
  // its message extended with `why_final` (when not empty) and the earlier runs' failures.
  static JobError FinalError(const JobRecord& job, const JobError& cause,
                             const std::string& why_final);

  // Why a RESTARTING job may not start its next run yet: ranks of the failed run still running,
  // or the backoff not yet over at `now`. nullopt when it may start.
  static std::optional<std::string> HoldReason(const JobRecord& job, int ranks_still_running,
                                               absl::Time restart_at, absl::Time now);

  // "restart 2 of 3": the restart after `job`'s restart_count restarts.
  static std::string Ordinal(const JobRecord& job);
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_RESTART_POLICY_H_
