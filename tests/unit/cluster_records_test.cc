// A finished run's last check (cluster_records.cc): a job whose ranks all exited 0 is SUCCEEDED
// only when the store holds every step 1..total_steps; else every agent is asked for the missing
// records, which its work dir keeps, and the job fails naming the steps when none has them. And a
// rank whose agent took the assignment but never starts it: its worker is blamed (lost), not a
// healthy rank that timed out waiting for it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/cluster_fixture.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

class ClusterRecordsTest : public ClusterFixture {
 protected:
  // The StepRecordsRequests `worker_id` has been sent, as "JOB FIRST-LAST".
  std::vector<std::string> Requests(const std::string& worker_id) {
    std::vector<std::string> out;
    for (const auto& m : channels_[worker_id].sent) {
      if (!m.has_step_records_request()) continue;
      const v1::StepRecordsRequest& r = m.step_records_request();
      out.push_back(r.job_id() + " " + std::to_string(r.first_step()) + "-" +
                    std::to_string(r.last_step()));
    }
    return out;
  }
  std::string Records(const std::string& worker_id, const std::string& job_id,
                      const std::vector<int>& steps) {
    v1::AgentMessage m;
    m.mutable_step_records()->set_job_id(job_id);
    for (const int step : steps) {
      m.mutable_step_records()->add_record_json("{\"step\": " + std::to_string(step) +
                                                ", \"loss\": 1.5}");
    }
    return Agent(worker_id, m);
  }
};

TEST_F(ClusterRecordsTest, MissingStepsAreAskedOfEveryAgentBeforeTheJobSucceeds) {
  const std::vector<std::string> workers = AddWorkers(3);
  auto job = Submit(1, 2, /*steps=*/5);
  ASSERT_TRUE(job.ok());
  std::map<int, std::string> ranks = AssignedWorkers(job->job_id);
  StartAll(job->job_id);
  for (int step = 1; step <= 2; ++step) Report(ranks[0], job->job_id, step, 3.0);
  for (const auto& [rank, w] : ranks) Exit(w, job->job_id, rank, 0);
  // Steps 3-5 never arrived (their agent died with them): not SUCCEEDED yet.
  JobRecord waiting = *store_->GetJob(job->job_id);
  EXPECT_EQ(waiting.state, JobState::kRunning);
  EXPECT_THAT(waiting.wait_reason, HasSubstr("the store lacks the records of steps 3-5"));
  for (const std::string& w : workers) {
    EXPECT_EQ(Requests(w), std::vector<std::string>{job->job_id + " 3-5"}) << w;
  }
  EXPECT_EQ(IdleWorkers(), 3) << "the ranks have ended: their workers are free";
  // An agent that comes back later (restarted) is asked too.
  const std::string late = AddWorkers(1).front();
  EXPECT_EQ(Requests(late), std::vector<std::string>{job->job_id + " 3-5"});

  // One agent holds none; another some, then the rest (a step again changes nothing).
  EXPECT_EQ(Records(workers[2], job->job_id, {}), "");
  EXPECT_EQ(Records(ranks[0], job->job_id, {3, 4}), "");
  EXPECT_EQ(StateOf(job->job_id), JobState::kRunning);
  EXPECT_THAT(store_->GetJob(job->job_id)->wait_reason, HasSubstr("steps 3-5"))
      << "the reason stays as first written while the job waits";
  EXPECT_EQ(Records(late, job->job_id, {4, 5}), "");
  JobRecord done = *store_->GetJob(job->job_id);
  EXPECT_EQ(done.state, JobState::kSucceeded);
  EXPECT_EQ(done.last_step, 5);
  EXPECT_EQ(done.wait_reason, "");
  EXPECT_EQ(store_->StepEvents(job->job_id, 0, 0)->size(), 5u);
  // Records that come after are not wanted: ignored.
  EXPECT_EQ(Records(late, job->job_id, {5}), "");
}

TEST_F(ClusterRecordsTest, WithoutTheRecordsTheJobFailsNamingTheSteps) {
  AddWorkers(2);
  auto job = Submit(1, 2, /*steps=*/6, {"job.max_restarts=3"});
  ASSERT_TRUE(job.ok());
  std::map<int, std::string> ranks = AssignedWorkers(job->job_id);
  StartAll(job->job_id);
  for (const int step : {1, 2, 4}) Report(ranks[0], job->job_id, step, 3.0);
  for (const auto& [rank, w] : ranks) Exit(w, job->job_id, rank, 0);
  // A record outside the job's steps is refused, like a RankReport's.
  EXPECT_THAT(Records(ranks[1], job->job_id, {7}), HasSubstr("outside the job's steps"));
  Beat(absl::Seconds(29));
  cluster_->Tick();
  EXPECT_EQ(StateOf(job->job_id), JobState::kRunning);
  Beat(absl::Seconds(2));
  cluster_->Tick();
  JobRecord failed = *store_->GetJob(job->job_id);
  ASSERT_EQ(failed.state, JobState::kFailed) << "never restarted: a rerun resumes past them";
  EXPECT_EQ(failed.restart_count, 0);
  ASSERT_TRUE(failed.error.has_value());
  EXPECT_EQ(failed.error->cause, kCauseStepsMissing);
  EXPECT_THAT(failed.error->message, HasSubstr("DATA_LOSS: every rank exited 0, but the records "
                                               "of steps 3 and 5-6 of 6 never reached the store"));
}

TEST_F(ClusterRecordsTest, EveryStepStoredSucceedsAtOnceAndAnEvalHasOneStep) {
  const std::vector<std::string> workers = AddWorkers(2);
  auto eval = Submit(1, 2, 3, {"job.mode=eval"});
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(eval->total_steps, 1);  // its one record holds the validation loss
  StartAll(eval->job_id);
  std::map<int, std::string> ranks = AssignedWorkers(eval->job_id);
  EXPECT_EQ(Report(ranks[0], eval->job_id, 1, 2.5), "");
  for (const auto& [rank, w] : ranks) Exit(w, eval->job_id, rank, 0);
  EXPECT_EQ(StateOf(eval->job_id), JobState::kSucceeded);
  for (const std::string& w : workers) EXPECT_TRUE(Requests(w).empty()) << w;
}

TEST_F(ClusterRecordsTest, ARankThatNeverStartsBlamesItsWorkerNotTheRankWaitingForIt) {
  AddWorkers(2);
  auto job = Submit(1, 2);
  ASSERT_TRUE(job.ok());
  std::map<int, std::string> ranks = AssignedWorkers(job->job_id);
  Started(ranks[0], job->job_id, 0);  // rank 1's agent took its assignment and did nothing
  Beat(absl::Seconds(29));
  cluster_->Tick();
  EXPECT_EQ(StateOf(job->job_id), JobState::kAssigned);
  Beat(absl::Seconds(2));
  cluster_->Tick();
  JobRecord failed = *store_->GetJob(job->job_id);
  EXPECT_EQ(failed.state, JobState::kFailed);
  ASSERT_TRUE(failed.error.has_value());
  EXPECT_EQ(failed.error->rank, 1);
  EXPECT_EQ(failed.error->worker_id, ranks[1]);
  EXPECT_EQ(failed.error->cause, kCauseWorkerLost);
  EXPECT_THAT(failed.error->message,
              HasSubstr("it took rank 1's assignment but did not start its trainer within 30s"));
  // Rank 0, which now waits in the rendezvous for ever, is stopped; its worker stays in the pool.
  bool cancelled = false;
  for (const auto& m : channels_[ranks[0]].sent) cancelled |= m.has_cancel();
  EXPECT_TRUE(cancelled);
}

}  // namespace
}  // namespace ringtrain
