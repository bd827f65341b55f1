// CompareJobSteps (client/compare_command.h): which steps of two jobs are compared, what is said
// about the others, and when a check fails.
#include "client/compare_command.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

JobSteps Job(const std::string& id, v1::JobState state, const std::vector<double>& losses) {
  JobSteps job;
  job.job.set_job_id(id);
  job.job.set_state(state);
  for (size_t i = 0; i < losses.size(); ++i) {
    v1::StepEvent event;
    event.set_step(static_cast<int64_t>(i) + 1);
    event.set_loss(losses[i]);
    job.steps.push_back(event);
  }
  return job;
}

Tolerance AssertEqual() {
  Tolerance t;
  t.mode = Tolerance::Mode::kAssertEqual;
  return t;
}

TEST(CompareJobStepsTest, EqualFinishedJobsPass) {
  const JobSteps a = Job("job-1", v1::JOB_STATE_SUCCEEDED, {6.5, 5.25, 4.125});
  const absl::StatusOr<JobComparison> c = CompareJobSteps(a, a, AssertEqual());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->passed());
  EXPECT_EQ(c->report.bitwise_equal_steps, 3);
  EXPECT_THAT(c->notes, IsEmpty());
}

TEST(CompareJobStepsTest, OneUlpIsAMismatchUnderAssertEqualButWithinAtol) {
  const JobSteps a = Job("job-1", v1::JOB_STATE_SUCCEEDED, {6.5, 5.25, 4.125});
  const JobSteps b =
      Job("job-2", v1::JOB_STATE_SUCCEEDED, {6.5, std::nextafter(5.25, 10.0), 4.125});
  absl::StatusOr<JobComparison> c = CompareJobSteps(a, b, AssertEqual());
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->passed());
  EXPECT_THAT(c->report.failed_steps, ElementsAre(2));
  Tolerance close;
  close.mode = Tolerance::Mode::kClose;
  close.atol = 1e-9;
  c = CompareJobSteps(a, b, close);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->passed());
}

TEST(CompareJobStepsTest, ARunningJobIsComparedOverTheStepsSoFar) {
  const JobSteps done = Job("job-1", v1::JOB_STATE_SUCCEEDED, {6.5, 5.25, 4.125, 3.0});
  const JobSteps running = Job("job-2", v1::JOB_STATE_RUNNING, {6.5, 5.25});
  const absl::StatusOr<JobComparison> c = CompareJobSteps(done, running, AssertEqual());
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->passed());
  EXPECT_EQ(c->report.steps.size(), 2u);
  EXPECT_FALSE(c->finished_with_different_steps);
  EXPECT_THAT(c->notes, ElementsAre("job-1 has 2 step(s) the other lacks (steps 1–4); compared "
                                    "steps 1–2",
                                    "job-2 is RUNNING: steps 1–2 so far"));
}

TEST(CompareJobStepsTest, FinishedJobsWithDifferentStepsFailAnyCheck) {
  const JobSteps a = Job("job-1", v1::JOB_STATE_SUCCEEDED, {6.5, 5.25, 4.125});
  const JobSteps b = Job("job-2", v1::JOB_STATE_FAILED, {6.5, 5.25});
  absl::StatusOr<JobComparison> c = CompareJobSteps(a, b, AssertEqual());
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->report.passed()) << "the common steps agree";
  EXPECT_TRUE(c->finished_with_different_steps);
  EXPECT_FALSE(c->passed());
  c = CompareJobSteps(a, b, Tolerance{});  // report only: no verdict to fail
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->passed());
}

TEST(CompareJobStepsTest, NoStepInCommonIsAnError) {
  const JobSteps a = Job("job-1", v1::JOB_STATE_SUCCEEDED, {6.5, 5.25});
  const JobSteps b = Job("job-2", v1::JOB_STATE_QUEUED, {});
  const absl::StatusOr<JobComparison> c = CompareJobSteps(a, b, AssertEqual());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(),
              HasSubstr("no step in common: job-1 has steps 1–2, job-2 has no steps"));
}

}  // namespace
}  // namespace ringtrain
