#include "client/job_filter.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/job_format.h"

namespace ringtrain {

absl::StatusOr<JobFilter> ParseJobFilter(const std::vector<std::string>& states,
                                         const std::string& name) {
  JobFilter filter;
  filter.name = name;
  std::vector<std::string> known;
  for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
    if (v1::JobState_IsValid(s) && s != v1::JOB_STATE_UNSPECIFIED) {
      known.push_back(JobStateName(static_cast<v1::JobState>(s)));
    }
  }
  for (const std::string& value : states) {
    for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
      const std::string wanted = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(part));
      const auto it = std::find(known.begin(), known.end(), wanted);
      if (it == known.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--state ", part, ": not a job state; use one or more of ",
            absl::AsciiStrToLower(absl::StrJoin(known, ", ")), " (e.g. --state running,queued)"));
      }
      v1::JobState state;
      v1::JobState_Parse(absl::StrCat("JOB_STATE_", wanted), &state);
      filter.states.push_back(state);
    }
  }
  return filter;
}

bool Matches(const JobFilter& filter, const v1::Job& job) {
  if (!filter.states.empty() &&
      std::find(filter.states.begin(), filter.states.end(), job.state()) == filter.states.end()) {
    return false;
  }
  return filter.name.empty() || absl::StrContains(job.name(), filter.name);
}

std::vector<v1::Job> FilterJobs(const JobFilter& filter, const std::vector<v1::Job>& jobs) {
  std::vector<v1::Job> out;
  for (const v1::Job& job : jobs) {
    if (Matches(filter, job)) out.push_back(job);
  }
  return out;
}

}  // namespace ringtrain
