// The coordinator's rules without gRPC: a Cluster over an in-memory job store, with fake agent
// channels that record what the coordinator sends down. Covers scheduling, the job lifecycle, the
// first-error rule, cancel, lost workers, bad requests and what a restarted coordinator finds.
// Time is a ManualClock shared by the store and the cluster: timeouts are crossed by advancing it,
// never by sleeping.
#include "coordinator/cluster.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/unit/cluster_fixture.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

class ClusterTest : public ClusterFixture {};

TEST_F(ClusterTest, JobRunsToSuccessAndFreesItsWorkers) {
  std::vector<std::string> workers = AddWorkers(2);
  auto job = Submit(1, 2);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state, JobState::kAssigned);
  EXPECT_EQ(job->degrees.world, 2);
  EventLog log;
  hub_.Subscribe(job->job_id, &log);

  std::map<int, std::string> ranks = AssignedWorkers(job->job_id);
  ASSERT_EQ(ranks.size(), 2u);
  const auto& a = channels_[ranks[0]].sent.back().assignment();
  EXPECT_EQ(a.world_size(), 2);
  EXPECT_EQ(a.master_addr(), "127.0.0.1");
  EXPECT_GE(a.master_port(), 41000);
  EXPECT_EQ(a.config_toml(), kTinyJobConfig);
  EXPECT_EQ(IdleWorkers(), 0);

  Started(ranks[0], job->job_id, 0);
  EXPECT_EQ(StateOf(job->job_id), JobState::kAssigned);
  Started(ranks[1], job->job_id, 1);
  EXPECT_EQ(StateOf(job->job_id), JobState::kRunning);
  for (int step = 1; step <= 3; ++step) Report(ranks[0], job->job_id, step, 5.0 - step);
  Report(ranks[0], job->job_id, 3, 2.0);  // a replayed report is taken once
  Exit(ranks[0], job->job_id, 0, 0);
  EXPECT_EQ(StateOf(job->job_id), JobState::kRunning);
  Exit(ranks[1], job->job_id, 1, 0);
  EXPECT_EQ(StateOf(job->job_id), JobState::kSucceeded);
  EXPECT_EQ(IdleWorkers(), 2);

  JobRecord done = *store_->GetJob(job->job_id);
  EXPECT_EQ(done.last_step, 3);
  EXPECT_DOUBLE_EQ(done.last_loss, 2.0);
  // RUNNING, 3 steps, SUCCEEDED reached the watcher, in that order.
  ASSERT_EQ(log.events.size(), 5u);
  EXPECT_EQ(log.events[0].state_change().to_state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(log.events[3].step().step(), 3);
  EXPECT_EQ(log.events[4].state_change().to_state(), v1::JOB_STATE_SUCCEEDED);
  hub_.Unsubscribe(job->job_id, &log);
}

TEST_F(ClusterTest, SecondJobWaitsWithAReasonThenRuns) {
  AddWorkers(4);
  auto big = Submit(1, 4);
  ASSERT_TRUE(big.ok());
  auto next = Submit(1, 2);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->state, JobState::kQueued);
  EXPECT_EQ(next->wait_reason, "waiting for 2 idle cpu workers, 0 free");

  std::map<int, std::string> ranks = AssignedWorkers(big->job_id);
  for (int step = 1; step <= 3; ++step) Report(ranks[0], big->job_id, step, 1.0);
  for (const auto& [rank, worker] : ranks) Exit(worker, big->job_id, rank, 0);
  EXPECT_EQ(StateOf(big->job_id), JobState::kSucceeded);
  EXPECT_EQ(StateOf(next->job_id), JobState::kAssigned);
  EXPECT_EQ(AssignedWorkers(next->job_id).size(), 2u);
}

TEST_F(ClusterTest, TwoSmallJobsRunSideBySideOnDisjointWorkers) {
  AddWorkers(4);
  auto a = Submit(1, 2);
  auto b = Submit(2, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->state, JobState::kAssigned);
  EXPECT_EQ(b->state, JobState::kAssigned);
  std::set<std::string> used;
  for (const auto& [rank, w] : AssignedWorkers(a->job_id)) used.insert(w);
  for (const auto& [rank, w] : AssignedWorkers(b->job_id)) used.insert(w);
  EXPECT_EQ(used.size(), 4u);
}

TEST_F(ClusterTest, FirstFailedRankFailsTheJobAndCancelsTheOthers) {
  AddWorkers(3);
  auto job = Submit(1, 2);
  ASSERT_TRUE(job.ok());
  std::map<int, std::string> ranks = AssignedWorkers(job->job_id);
  Started(ranks[0], job->job_id, 0);
  Started(ranks[1], job->job_id, 1);
  Exit(ranks[1], job->job_id, 1, 0, /*signal=*/9);
  JobRecord failed = *store_->GetJob(job->job_id);
  EXPECT_EQ(failed.state, JobState::kFailed);
  ASSERT_TRUE(failed.error.has_value());
  EXPECT_EQ(failed.error->rank, 1);
  EXPECT_EQ(failed.error->worker_id, ranks[1]);
  EXPECT_EQ(failed.error->exit_status, 128 + 9);
  EXPECT_EQ(failed.error->stderr_tail, "E boom\n");
  EXPECT_THAT(failed.error->message, HasSubstr("killed by signal 9"));
  ASSERT_TRUE(channels_[ranks[0]].sent.back().has_cancel());
  // The survivor's own failure (its peer vanished) does not replace the first error.
  Exit(ranks[0], job->job_id, 0, 1);
  EXPECT_EQ(store_->GetJob(job->job_id)->error->rank, 1);
  EXPECT_EQ(IdleWorkers(), 3);
}

TEST_F(ClusterTest, CancelStopsEveryRankAndFreesWorkersOnExit) {
  AddWorkers(2);
  auto job = Submit(1, 2);
  ASSERT_TRUE(job.ok());
  std::map<int, std::string> ranks = AssignedWorkers(job->job_id);
  auto cancelled = cluster_->Cancel(job->job_id);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state, JobState::kCancelled);
  for (const auto& [rank, w] : ranks) {
    ASSERT_TRUE(channels_[w].sent.back().has_cancel());
    EXPECT_EQ(channels_[w].sent.back().cancel().job_id(), job->job_id);
  }
  EXPECT_EQ(IdleWorkers(), 0);
  for (const auto& [rank, w] : ranks) Exit(w, job->job_id, rank, 0, 15);
  EXPECT_EQ(IdleWorkers(), 2);
  EXPECT_EQ(StateOf(job->job_id), JobState::kCancelled);
  // Cancelling a finished job changes nothing; an unknown id is NOT_FOUND.
  EXPECT_EQ(cluster_->Cancel(job->job_id)->state, JobState::kCancelled);
  EXPECT_EQ(cluster_->Cancel("job-999999").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClusterTest, CancellingTheQueueHeadLetsTheNextJobRun) {
  AddWorkers(2);
  auto running = Submit(1, 2);
  auto head = Submit(1, 2);
  ASSERT_TRUE(running.ok() && head.ok());
  EXPECT_EQ(cluster_->Cancel(head->job_id)->state, JobState::kCancelled);
  EXPECT_EQ(StateOf(head->job_id), JobState::kCancelled);
}

TEST_F(ClusterTest, SilentWorkerIsLostAndItsJobFailsNamingIt) {
  std::vector<std::string> workers = AddWorkers(2);
  auto job = Submit(1, 2);
  ASSERT_TRUE(job.ok());
  std::map<int, std::string> ranks = AssignedWorkers(job->job_id);
  // Rank 0's worker keeps its heartbeat; rank 1's goes silent.
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Milliseconds(100));
    v1::AgentMessage beat;
    beat.mutable_heartbeat();
    Agent(ranks[0], beat);
  }
  cluster_->Tick();
  JobRecord failed = *store_->GetJob(job->job_id);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_EQ(failed.error->rank, 1);
  EXPECT_EQ(failed.error->worker_id, ranks[1]);
  EXPECT_THAT(failed.error->message, HasSubstr("was lost: no heartbeat"));
  EXPECT_TRUE(channels_[ranks[1]].closed.has_value());
  ASSERT_TRUE(channels_[ranks[0]].sent.back().has_cancel());
  // A lost worker must register again.
  EXPECT_EQ(cluster_->AttachSession(ranks[1], credentials_[ranks[1]], &channels_[ranks[1]]).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ClusterTest, WorkerIsLostOnlyOnceSilentPastTheTimeout) {
  AddWorkers(1);
  clock_.Advance(absl::Milliseconds(300));  // exactly the timeout: not yet past it
  cluster_->Tick();
  EXPECT_EQ(IdleWorkers(), 1);
  clock_.Advance(absl::Milliseconds(1));
  cluster_->Tick();
  EXPECT_EQ(IdleWorkers(), 0);
  EXPECT_EQ(cluster_->GetCounts().workers_by_state["lost"], 1);
}

TEST_F(ClusterTest, BadRequestsNameTheProblem) {
  AddWorkers(2);
  v1::SubmitJobRequest garbage;
  garbage.set_config_toml("[model\ndim = ");
  auto bad = cluster_->Submit(garbage);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);

  v1::SubmitJobRequest bad_key;
  bad_key.set_config_toml(kTinyJobConfig);
  bad_key.add_overrides("training.steps=-4");
  EXPECT_THAT(cluster_->Submit(bad_key).status().message(), HasSubstr("training.steps"));

  auto too_big = Submit(2, 2);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(too_big.status().message(), HasSubstr("needs 4 cpu workers but the pool has 2"));

  v1::SubmitJobRequest gpu;
  gpu.set_config_toml(kTinyJobConfig);
  gpu.set_device_kind("tpu");
  EXPECT_THAT(cluster_->Submit(gpu).status().message(), HasSubstr("\"tpu\""));

  auto indivisible = Submit(1, 3);  // seq_len 64 is not divisible by 2 x 3
  EXPECT_EQ(indivisible.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster_->AttachSession("worker-77", "", nullptr).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->ListJobs()->empty());  // nothing half-stored
}

TEST_F(ClusterTest, RestartKeepsFinishedJobsRequeuesQueuedAndFailsRanksThatDoNotComeBack) {
  AddWorkers(2);
  auto done = Submit(1, 2);
  ASSERT_TRUE(done.ok());
  std::map<int, std::string> ranks = AssignedWorkers(done->job_id);
  for (int step = 1; step <= 3; ++step) Report(ranks[0], done->job_id, step, 3.5);
  for (const auto& [rank, w] : ranks) Exit(w, done->job_id, rank, 0);
  auto running = Submit(1, 2);
  auto queued = Submit(1, 2);
  ASSERT_TRUE(running.ok() && queued.ok());
  EXPECT_EQ(StateOf(running->job_id), JobState::kAssigned);

  channels_.clear();
  Reopen();
  EXPECT_EQ(StateOf(done->job_id), JobState::kSucceeded);
  EXPECT_EQ(store_->StepEvents(done->job_id, 0, 0)->size(), 3u);
  EXPECT_EQ(StateOf(running->job_id), JobState::kAssigned);  // waiting for its agents
  EXPECT_EQ(StateOf(queued->job_id), JobState::kQueued);
  clock_.Advance(absl::Milliseconds(400));
  cluster_->Tick();
  JobRecord orphan = *store_->GetJob(running->job_id);
  EXPECT_EQ(orphan.state, JobState::kFailed);
  EXPECT_EQ(orphan.error->rank, 0);
  EXPECT_THAT(orphan.error->message, HasSubstr("coordinator restarted and rank 0's worker"));
  // Fresh agents (no previous id) get new names that no old mesh uses; the queued job starts.
  std::vector<std::string> fresh = AddWorkers(2);
  EXPECT_EQ(fresh, (std::vector<std::string>{"worker-3", "worker-4"}));
  EXPECT_EQ(StateOf(queued->job_id), JobState::kAssigned);
}

TEST_F(ClusterTest, RunningJobIsReadoptedWhenItsAgentsComeBackAfterARestart) {
  AddWorkers(2);
  auto job = Submit(1, 2, /*steps=*/4);
  ASSERT_TRUE(job.ok());
  std::map<int, std::string> ranks = AssignedWorkers(job->job_id);
  Started(ranks[0], job->job_id, 0);
  Started(ranks[1], job->job_id, 1);
  Report(ranks[0], job->job_id, 1, 4.0);

  channels_.clear();
  Reopen();
  EXPECT_EQ(StateOf(job->job_id), JobState::kRunning);
  // The agents register again, naming their old ids and the ranks they still run.
  for (const auto& [rank, old_id] : ranks) ComeBack(old_id, job->job_id, rank);
  // Reports buffered during the outage arrive (step 1 again: taken once), then the rest.
  for (int step = 1; step <= 4; ++step) Report(ranks[0], job->job_id, step, 4.0 - step / 2.0);
  clock_.Advance(absl::Milliseconds(400));
  for (const auto& [rank, w] : ranks) {
    v1::AgentMessage beat;
    beat.mutable_heartbeat();
    Agent(w, beat);
  }
  cluster_->Tick();  // past the adoption deadline: nothing expires, every rank is back
  EXPECT_EQ(StateOf(job->job_id), JobState::kRunning);
  for (const auto& [rank, w] : ranks) Exit(w, job->job_id, rank, 0);
  JobRecord finished = *store_->GetJob(job->job_id);
  EXPECT_EQ(finished.state, JobState::kSucceeded);
  EXPECT_EQ(finished.last_step, 4);
  EXPECT_EQ(store_->StepEvents(job->job_id, 0, 0)->size(), 4u);
  EXPECT_EQ(IdleWorkers(), 2);

  // An agent naming an id the coordinator never gave out gets a new id, and no rank.
  v1::RegisterRequest stale;
  stale.set_device_kind("cpu");
  stale.set_device("cpu");
  stale.set_address("127.0.0.1");
  stale.set_previous_worker_id("worker-9");
  stale.set_previous_credential("00");
  stale.set_running_job_id(job->job_id);
  stale.set_running_rank(0);
  auto response = cluster_->Register(stale);
  ASSERT_TRUE(response.ok());
  EXPECT_EQ(response->worker_id(), "worker-3");
  EXPECT_FALSE(response->rank_adopted());
}

}  // namespace
}  // namespace ringtrain
