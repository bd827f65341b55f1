// `ringctl list --state S[,S...] --name TEXT`: which jobs a listing shows. Pure, so tests pin it.
#ifndef RINGTRAIN_CLIENT_JOB_FILTER_H_
#define RINGTRAIN_CLIENT_JOB_FILTER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

struct JobFilter {
  std::vector<v1::JobState> states;  // empty: any state
  std::string name;                  // empty: any name; else a substring of the job's name
};

// The filter of `--state` values (each a state name in any case, or several separated by commas:
// "running,queued") and `--name`. INVALID_ARGUMENT naming the value and the states there are.
absl::StatusOr<JobFilter> ParseJobFilter(const std::vector<std::string>& states,
                                         const std::string& name);

bool Matches(const JobFilter& filter, const v1::Job& job);

// The jobs that match, in their order.
std::vector<v1::Job> FilterJobs(const JobFilter& filter, const std::vector<v1::Job>& jobs);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_JOB_FILTER_H_
