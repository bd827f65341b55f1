#include "coordinator/restart_policy.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/trainer_exit.h"

namespace ringtrain {
namespace {

std::string Seconds(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(100)));
}

}  // namespace

int RestartsUsed(const JobRecord& job) {
  int heals = 0;
  for (const JobError& f : job.failures) heals += f.recovery == kRecoveryHealed ? 1 : 0;
  return job.restart_count + heals;
}

int HealsOfThisRun(const JobRecord& job) {
  int heals = 0;
  for (const JobError& f : job.failures) {
    if (f.recovery == kRecoveryRestarted) heals = 0;
    if (f.recovery == kRecoveryHealed) ++heals;
  }
  return heals;
}

std::string RestartPolicy::Ordinal(const JobRecord& job) {
  return absl::StrCat("restart ", job.restart_count + 1, " of ", job.restart.max_restarts);
}

JobError RestartPolicy::FinalError(const JobRecord& job, const JobError& cause,
                                   const std::string& why_final) {
  JobError error = cause;
  if (!why_final.empty()) absl::StrAppend(&error.message, "; ", why_final);
  std::vector<std::string> earlier;
  for (size_t i = 0; i + 1 < job.failures.size(); ++i) {
    earlier.push_back(absl::StrCat("run ", i + 1, ": ", job.failures[i].message));
  }
  if (!earlier.empty()) {
    absl::StrAppend(&error.message, "; earlier failures: ", absl::StrJoin(earlier, "; "));
  }
  return error;
}

RestartDecision RestartPolicy::Decide(const JobRecord& job, const JobError& cause, absl::Time now) {
  RestartDecision decision;
  // A trainer that rejected its config would reject it again: a restart cannot help.
  const bool rejected = cause.cause == kCauseRankExit && cause.exit_status == kTrainerExitRejected;
  // Nor would an agent that refused a rank (a path outside its roots) accept it the next time.
  const bool refused = cause.cause == kCauseRankRefused;
  if (RestartsUsed(job) < job.restart.max_restarts && !rejected && !refused) {
    const absl::Duration backoff = absl::Milliseconds(job.restart.backoff_ms);
    decision.restart = true;
    decision.restart_at = now + backoff;
    decision.wait_reason = absl::StrCat(Ordinal(job), ": stopping the failed run's ranks");
    decision.message = absl::StrCat(cause.message, "; ", Ordinal(job),
                                    " from the latest checkpoint in ", Seconds(backoff));
    return decision;
  }
  std::string why_final;
  if (rejected) {
    why_final = "not restarted: the trainer rejected the config, and would again";
  } else if (refused) {
    why_final = "not restarted: fix the config (or the agents' roots) and submit it again";
  } else if (job.restart.max_restarts > 0) {
    why_final = absl::StrCat("no restarts left (", RestartsUsed(job),
                             " of job.max_restarts = ", job.restart.max_restarts, " used)");
  }
  decision.error = FinalError(job, cause, why_final);
  decision.message = decision.error.message;
  return decision;
}

std::optional<std::string> RestartPolicy::HoldReason(const JobRecord& job, int ranks_still_running,
                                                     absl::Time restart_at, absl::Time now) {
  if (ranks_still_running > 0) {
    return absl::StrCat(Ordinal(job), ": stopping the failed run (", ranks_still_running, " of ",
                        job.mesh.size(), " ranks still running)");
  }
  if (now < restart_at) {
    return absl::StrCat(Ordinal(job), ": waiting out job.restart_backoff_seconds (",
                        Seconds(absl::Milliseconds(job.restart.backoff_ms)), ")");
  }
  return std::nullopt;
}

}  // namespace ringtrain
