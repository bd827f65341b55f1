// RestartPolicy (coordinator/restart_policy.h) on its own: a record, a cause and a time in, a
// decision out; no cluster, no threads, no clock.
#include "coordinator/restart_policy.h"

#include <string>

#include "absl/time/time.h"
#include "common/trainer_exit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

JobError Cause(const std::string& cause, int exit_status, const std::string& message) {
  JobError error;
  error.rank = 1;
  error.worker_id = "worker-2";
  error.exit_status = exit_status;
  error.cause = cause;
  error.message = message;
  return error;
}

// A job with `max_restarts`, `restart_count` of them used, whose runs failed with `messages`.
JobRecord Job(int max_restarts, int restart_count, std::vector<std::string> messages) {
  JobRecord job;
  job.job_id = "job-000001";
  job.restart.max_restarts = max_restarts;
  job.restart.backoff_ms = 2500;
  job.restart_count = restart_count;
  for (const std::string& m : messages) job.failures.push_back(Cause(kCauseRankExit, 1, m));
  job.mesh.resize(4);
  return job;
}

TEST(RestartPolicyTest, ARunWithRestartsLeftRestartsAfterTheBackoff) {
  const JobError cause = Cause(kCauseWorkerLost, -1, "worker-2 was lost");
  JobRecord job = Job(3, 1, {"rank 0 exited with status 1"});
  job.failures.push_back(cause);
  const RestartDecision d = RestartPolicy::Decide(job, cause, kNow);
  EXPECT_TRUE(d.restart);
  EXPECT_EQ(d.restart_at, kNow + absl::Milliseconds(2500));
  EXPECT_EQ(d.wait_reason, "restart 2 of 3: stopping the failed run's ranks");
  EXPECT_EQ(d.message, "worker-2 was lost; restart 2 of 3 from the latest checkpoint in 2.5s");
}

TEST(RestartPolicyTest, NoRestartsLeftFailsListingEveryEarlierRun) {
  const JobError cause = Cause(kCauseRankHung, -1, "rank 1 is hung");
  JobRecord job = Job(2, 2, {"first", "second"});
  job.failures.push_back(cause);
  const RestartDecision d = RestartPolicy::Decide(job, cause, kNow);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.error.cause, kCauseRankHung);
  EXPECT_EQ(d.error.rank, 1);
  EXPECT_EQ(d.error.message,
            "rank 1 is hung; no restarts left (2 of job.max_restarts = 2 used); earlier failures: "
            "run 1: first; run 2: second");
  EXPECT_EQ(d.message, d.error.message);
}

TEST(RestartPolicyTest, AJobWithoutRestartsFailsWithItsCauseAlone) {
  const JobError cause = Cause(kCauseRankExit, 1, "rank 1 exited with status 1");
  JobRecord job = Job(0, 0, {});
  job.failures.push_back(cause);
  const RestartDecision d = RestartPolicy::Decide(job, cause, kNow);
  EXPECT_FALSE(d.restart);
  EXPECT_EQ(d.error.message, "rank 1 exited with status 1");
}

TEST(RestartPolicyTest, ARejectedConfigIsNotRestartedWhateverIsLeft) {
  const JobError cause = Cause(kCauseRankExit, kTrainerExitRejected, "rank 0 exited with status 2");
  JobRecord job = Job(5, 0, {});
  job.failures.push_back(cause);
  const RestartDecision d = RestartPolicy::Decide(job, cause, kNow);
  EXPECT_FALSE(d.restart);
  EXPECT_THAT(d.error.message,
              HasSubstr("not restarted: the trainer rejected the config, and would again"));
  // The same status from anything but a rank's own exit is not a rejected config.
  const JobError lost = Cause(kCauseWorkerLost, kTrainerExitRejected, "lost");
  EXPECT_TRUE(RestartPolicy::Decide(job, lost, kNow).restart);
}

TEST(RestartPolicyTest, ARankItsAgentRefusedIsNotRestarted) {
  const JobError cause = Cause(kCauseRankRefused, kAgentExitRefused,
                               "rank 0 on worker-1 (h) was refused by its agent before a trainer "
                               "started: training.dataset_path = \"/x\": is outside --data-root");
  JobRecord job = Job(5, 0, {});
  job.failures.push_back(cause);
  const RestartDecision d = RestartPolicy::Decide(job, cause, kNow);
  EXPECT_FALSE(d.restart);
  EXPECT_THAT(d.error.message, HasSubstr("is outside --data-root; not restarted: fix the config"));
  EXPECT_EQ(d.error.cause, kCauseRankRefused);
}

TEST(RestartPolicyTest, ARestartingJobIsHeldUntilItsRanksStopAndTheBackoffPasses) {
  const JobRecord job = Job(3, 0, {"x"});
  const absl::Time at = kNow + absl::Seconds(2);
  EXPECT_EQ(RestartPolicy::HoldReason(job, 3, at, kNow + absl::Seconds(9)),
            "restart 1 of 3: stopping the failed run (3 of 4 ranks still running)");
  EXPECT_EQ(RestartPolicy::HoldReason(job, 0, at, kNow),
            "restart 1 of 3: waiting out job.restart_backoff_seconds (2.5s)");
  EXPECT_EQ(RestartPolicy::HoldReason(job, 0, at, at), std::nullopt);
}

TEST(RestartPolicyTest, TheFinalErrorOfAnUnschedulableJobKeepsItsMessage) {
  const JobError cause = Cause(kCauseUnschedulable, 0, "the pool could not hold the job");
  JobRecord job = Job(1, 0, {"rank 0 exited with status 1"});
  job.failures.push_back(cause);
  EXPECT_EQ(
      RestartPolicy::FinalError(job, cause, "").message,
      "the pool could not hold the job; earlier failures: run 1: rank 0 exited with status 1");
}

TEST(RestartPolicyTest, HealsInPlaceUseRestartsAndCountPerRun) {
  JobRecord job = Job(2, 0, {"a", "b"});
  job.failures[0].recovery = kRecoveryHealed;
  EXPECT_EQ(RestartsUsed(job), 1);
  EXPECT_EQ(HealsOfThisRun(job), 1);
  job.failures[1].recovery = kRecoveryHealed;
  EXPECT_EQ(RestartsUsed(job), 2);
  const JobError cause = Cause(kCauseRankExit, 1, "rank 1 exited with status 1");
  EXPECT_FALSE(RestartPolicy::Decide(job, cause, kNow).restart) << "two heals used both";
  // A restart from storage starts a new run: its heals count from 0.
  job.failures[1].recovery = kRecoveryRestarted;
  job.restart_count = 1;
  EXPECT_EQ(RestartsUsed(job), 2);
  EXPECT_EQ(HealsOfThisRun(job), 0);
}

}  // namespace
}  // namespace ringtrain
