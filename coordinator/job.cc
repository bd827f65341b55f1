#include "coordinator/job.h"

#include <cstdio>

namespace ringtrain {

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued: return "QUEUED";
    case JobState::kAssigned: return "ASSIGNED";
    case JobState::kRunning: return "RUNNING";
    case JobState::kSucceeded: return "SUCCEEDED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCancelled: return "CANCELLED";
    case JobState::kRestarting: return "RESTARTING";
  }
  return "UNKNOWN";
}

std::optional<JobState> JobStateFromName(const std::string& name) {
  for (JobState s :
       {JobState::kQueued, JobState::kAssigned, JobState::kRunning, JobState::kSucceeded,
        JobState::kFailed, JobState::kCancelled, JobState::kRestarting}) {
    if (name == JobStateName(s)) return s;
  }
  return std::nullopt;
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

bool IsAllowedTransition(JobState from, JobState to) {
  using S = JobState;
  switch (from) {
    case S::kQueued: return to == S::kAssigned || to == S::kCancelled || to == S::kFailed;
    case S::kAssigned:
      return to == S::kRunning || to == S::kFailed || to == S::kCancelled || to == S::kQueued ||
             to == S::kRestarting;
    case S::kRunning:  // RUNNING again: a lost rank healed in place (an event in the history)
      return to == S::kSucceeded || to == S::kFailed || to == S::kCancelled ||
             to == S::kRestarting || to == S::kRunning;
    case S::kRestarting: return to == S::kAssigned || to == S::kFailed || to == S::kCancelled;
    default: return false;  // final states stay final
  }
}

std::string JobIdForNumber(int64_t number) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "job-%06lld", static_cast<long long>(number));
  return buf;
}

}  // namespace ringtrain
