// `ringctl list --state/--name` (client/job_filter.h).
#include "client/job_filter.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

v1::Job MakeJob(const std::string& id, const std::string& name, v1::JobState state) {
  v1::Job job;
  job.set_job_id(id);
  job.set_name(name);
  job.set_state(state);
  return job;
}

std::vector<std::string> Ids(const std::vector<v1::Job>& jobs) {
  std::vector<std::string> ids;
  for (const v1::Job& job : jobs) ids.push_back(job.job_id());
  return ids;
}

TEST(JobFilterTest, StatesInAnyCaseRepeatedOrCommaSeparated) {
  const std::vector<v1::Job> jobs = {MakeJob("j4", "cp4-long", v1::JOB_STATE_RUNNING),
                                     MakeJob("j3", "cp1", v1::JOB_STATE_QUEUED),
                                     MakeJob("j2", "cp4", v1::JOB_STATE_FAILED),
                                     MakeJob("j1", "baseline", v1::JOB_STATE_SUCCEEDED)};
  absl::StatusOr<JobFilter> filter = ParseJobFilter({"running,Queued"}, "");
  ASSERT_TRUE(filter.ok()) << filter.status();
  EXPECT_THAT(Ids(FilterJobs(*filter, jobs)), ::testing::ElementsAre("j4", "j3"));
  filter = ParseJobFilter({"failed", "SUCCEEDED"}, "");
  ASSERT_TRUE(filter.ok());
  EXPECT_THAT(Ids(FilterJobs(*filter, jobs)), ::testing::ElementsAre("j2", "j1"));
  // --name: a substring, with the states.
  filter = ParseJobFilter({}, "cp4");
  ASSERT_TRUE(filter.ok());
  EXPECT_THAT(Ids(FilterJobs(*filter, jobs)), ::testing::ElementsAre("j4", "j2"));
  filter = ParseJobFilter({"failed"}, "cp4");
  ASSERT_TRUE(filter.ok());
  EXPECT_THAT(Ids(FilterJobs(*filter, jobs)), ::testing::ElementsAre("j2"));
  // No filter: everything.
  filter = ParseJobFilter({}, "");
  ASSERT_TRUE(filter.ok());
  EXPECT_EQ(FilterJobs(*filter, jobs).size(), 4u);
}

TEST(JobFilterTest, AnUnknownStateNamesTheOnesThereAre) {
  const absl::StatusOr<JobFilter> filter = ParseJobFilter({"running,finished"}, "");
  ASSERT_EQ(filter.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(filter.status().message(), HasSubstr("--state finished: not a job state"));
  EXPECT_THAT(filter.status().message(), HasSubstr("queued, assigned, running, succeeded"));
}

}  // namespace
}  // namespace ringtrain
