// The restart policy and the failure rules of the Cluster, without gRPC (tests/unit/
// cluster_fixture.h): which rank a failure is blamed on, RESTARTING and the next run on any idle
// workers, attempts that keep a late message of an earlier run out, the restart budget, elastic
// restarts onto fewer workers, jobs the pool can no longer hold, cancel in every state, and
// messages taken once however often they are sent.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/trainer_exit.h"
#include "tests/unit/cluster_fixture.h"

namespace ringtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ClusterRestartTest : public ClusterFixture {
 protected:
  // A cp-2 job of `steps` steps with `max_restarts` and a 1 s backoff.
  JobRecord SubmitRestartable(int max_restarts, int dp = 1, int cp = 2, int steps = 3,
                              std::vector<std::string> more = {}) {
    more.push_back("job.max_restarts=" + std::to_string(max_restarts));
    more.push_back("job.restart_backoff_seconds=1");
    absl::StatusOr<JobRecord> job = Submit(dp, cp, steps, more);
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }
  JobRecord Get(const std::string& job_id) { return *store_->GetJob(job_id); }
  // The last message sent to `worker`.
  const v1::CoordinatorMessage& Last(const std::string& worker) {
    return channels_[worker].sent.back();
  }
  std::vector<std::string> StateMessages(const std::string& job_id, JobState to) {
    std::vector<std::string> out;
    const std::vector<StateChange> changes = *store_->StateChanges(job_id);
    for (const StateChange& c : changes) {
      if (c.to == to) out.push_back(c.message);
    }
    return out;
  }
};

TEST_F(ClusterRestartTest, AKilledRankRestartsTheJobOnIdleWorkersWithTheNextAttempt) {
  AddWorkers(3);
  const JobRecord job = SubmitRestartable(2);
  std::map<int, std::string> first = AssignedWorkers(job.job_id);
  StartAll(job.job_id);
  Report(first[0], job.job_id, 1, 4.0);
  Report(first[0], job.job_id, 2, 3.0);
  EXPECT_EQ(Exit(first[1], job.job_id, 1, 0, /*signal=*/9), "");

  JobRecord restarting = Get(job.job_id);
  EXPECT_EQ(restarting.state, JobState::kRestarting);
  ASSERT_EQ(restarting.failures.size(), 1u);
  EXPECT_EQ(restarting.failures[0].cause, kCauseRankExit);
  EXPECT_EQ(restarting.failures[0].rank, 1);
  EXPECT_EQ(restarting.failures[0].step, 2);
  EXPECT_FALSE(restarting.error.has_value()) << "not failed: restarting";
  EXPECT_THAT(StateMessages(job.job_id, JobState::kRestarting),
              ElementsAre(HasSubstr("killed by signal 9; restart 1 of 2 from the latest "
                                    "checkpoint in 1s")));
  // The survivor is stopped; it answers with its exit (it lost its peer).
  ASSERT_TRUE(Last(first[0]).has_cancel());
  EXPECT_EQ(Last(first[0]).cancel().rank(), 0);
  EXPECT_EQ(Last(first[0]).cancel().attempt(), 0);
  EXPECT_THAT(Get(job.job_id).wait_reason, HasSubstr("stopping the failed run"));
  Exit(first[0], job.job_id, 0, kTrainerExitPeerLost);
  EXPECT_EQ(Get(job.job_id).state, JobState::kRestarting);
  EXPECT_EQ(Get(job.job_id).failures.size(), 1u) << "a symptom after the cause adds nothing";
  cluster_->Tick();
  EXPECT_THAT(Get(job.job_id).wait_reason, HasSubstr("restart_backoff_seconds"));

  // After the backoff it starts again, ahead of the queue, on any idle workers.
  Beat(absl::Seconds(1));
  cluster_->Tick();
  JobRecord second_run = Get(job.job_id);
  EXPECT_EQ(second_run.state, JobState::kAssigned);
  EXPECT_EQ(second_run.restart_count, 1);
  std::map<int, std::string> second = AssignedWorkers(job.job_id, /*attempt=*/1);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_THAT(StateMessages(job.job_id, JobState::kAssigned).back(),
              HasSubstr("run 2 (restart 1 of 2, from the latest checkpoint)"));
  // A late message of run 1 is refused, whatever worker sends it.
  EXPECT_THAT(Report(second[0], job.job_id, 3, 1.0, /*attempt=*/0), HasSubstr("not assigned"));
  StartAll(job.job_id, 1);
  EXPECT_EQ(Get(job.job_id).state, JobState::kRunning);
  // Run 2 resumed from step 1's checkpoint: step 2 again (taken once), then step 3.
  Report(second[0], job.job_id, 2, 3.0, 1);
  Report(second[0], job.job_id, 3, 2.0, 1);
  EXPECT_EQ(store_->StepEvents(job.job_id, 0, 0)->size(), 3u);
  EXPECT_EQ(cluster_->GetCounts().recomputed_steps, 1);
  for (const auto& [rank, w] : second) Exit(w, job.job_id, rank, 0, 0, 1);
  const JobRecord done = Get(job.job_id);
  EXPECT_EQ(done.state, JobState::kSucceeded);
  EXPECT_EQ(done.last_step, 3);
  EXPECT_EQ(IdleWorkers(), 3);
  EXPECT_EQ(cluster_->GetCounts().restarts_by_cause[kCauseRankExit], 1);
}

TEST_F(ClusterRestartTest, ASymptomWaitsForItsCauseAndTheHungRankIsBlamed) {
  AddWorkers(2);
  const JobRecord job = SubmitRestartable(1);
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  StartAll(job.job_id);
  // Rank 0 timed out waiting for rank 1: a symptom. The job waits for the cause.
  Exit(ranks[0], job.job_id, 0, kTrainerExitPeerLost);
  EXPECT_EQ(Get(job.job_id).state, JobState::kRunning);
  EXPECT_EQ(Hung(ranks[1], job.job_id, 1), "");
  const JobRecord restarting = Get(job.job_id);
  EXPECT_EQ(restarting.state, JobState::kRestarting);
  ASSERT_EQ(restarting.failures.size(), 1u);
  EXPECT_EQ(restarting.failures[0].cause, kCauseRankHung);
  EXPECT_EQ(restarting.failures[0].rank, 1);
  EXPECT_EQ(restarting.failures[0].worker_id, ranks[1]);
  EXPECT_THAT(restarting.failures[0].message,
              HasSubstr("rank 1 on " + ranks[1] + " (h1) is hung: no heartbeat"));
  ASSERT_TRUE(Last(ranks[1]).has_cancel()) << "the hung rank is stopped";
}

TEST_F(ClusterRestartTest, ASymptomWithNoCauseIsBlamedWhenItsWindowPasses) {
  AddWorkers(2);
  const JobRecord job = SubmitRestartable(0);
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  StartAll(job.job_id);
  Exit(ranks[1], job.job_id, 1, kTrainerExitPeerLost);
  cluster_->Tick();
  EXPECT_EQ(Get(job.job_id).state, JobState::kRunning);
  Beat(Cluster::kSymptomWindow);
  cluster_->Tick();
  const JobRecord failed = Get(job.job_id);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_EQ(failed.error->rank, 1);
  EXPECT_EQ(failed.error->exit_status, kTrainerExitPeerLost);
}

TEST_F(ClusterRestartTest, AWorkerWhoseSessionBrokeIsBlamedForTheSurvivorsSymptom) {
  // As in production, the heartbeat timeout is longer than the symptom window: the broken
  // session, not a lost worker, is what the coordinator knows when the window ends.
  worker_timeout_ = absl::Seconds(10);
  Reopen();
  AddWorkers(2);
  const JobRecord job = SubmitRestartable(1);
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  StartAll(job.job_id);
  // Rank 1's agent died: its stream broke, its trainer died with it, rank 0 noticed.
  cluster_->DetachSession(ranks[1], &channels_[ranks[1]]);
  Exit(ranks[0], job.job_id, 0, kTrainerExitPeerLost);
  Beat(Cluster::kSymptomWindow - absl::Milliseconds(100), ranks[1]);
  cluster_->Tick();
  EXPECT_EQ(Get(job.job_id).state, JobState::kRunning) << "the window has not passed";
  Beat(absl::Milliseconds(100), ranks[1]);
  cluster_->Tick();
  const JobRecord restarting = Get(job.job_id);
  EXPECT_EQ(restarting.state, JobState::kRestarting);
  ASSERT_EQ(restarting.failures.size(), 1u);
  EXPECT_EQ(restarting.failures[0].cause, kCauseWorkerLost);
  EXPECT_EQ(restarting.failures[0].rank, 1);
  EXPECT_THAT(restarting.failures[0].message,
              HasSubstr("worker " + ranks[1] + " (h1) running rank 1 lost its session"));
  // It is not restarted until the lost worker's rank is accounted for: its heartbeat timeout.
  Beat(absl::Seconds(1), ranks[1]);
  cluster_->Tick();
  EXPECT_EQ(Get(job.job_id).state, JobState::kRestarting);
  EXPECT_THAT(Get(job.job_id).wait_reason, HasSubstr("1 of 2 ranks still running"));
}

TEST_F(ClusterRestartTest, TheRestartBudgetRunsOutAndEveryCauseIsListed) {
  AddWorkers(2);
  const JobRecord job = SubmitRestartable(1);
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  StartAll(job.job_id);
  Exit(ranks[1], job.job_id, 1, 0, 9);
  Exit(ranks[0], job.job_id, 0, kTrainerExitPeerLost);
  Beat(absl::Seconds(1));
  cluster_->Tick();
  std::map<int, std::string> second = AssignedWorkers(job.job_id, 1);
  ASSERT_EQ(second.size(), 2u);
  StartAll(job.job_id, 1);
  Exit(second[0], job.job_id, 0, 1, 0, 1);  // rank 0 fails on its own this time
  const JobRecord failed = Get(job.job_id);
  EXPECT_EQ(failed.state, JobState::kFailed);
  ASSERT_EQ(failed.failures.size(), 2u);
  EXPECT_EQ(failed.failures[0].rank, 1);
  EXPECT_EQ(failed.failures[1].rank, 0);
  EXPECT_EQ(failed.error->rank, 0);
  EXPECT_THAT(failed.error->message, HasSubstr("exited with status 1; no restarts left "
                                               "(1 of job.max_restarts = 1 used); earlier "
                                               "failures: run 1: rank 1 on"));
  EXPECT_THAT(failed.error->message, HasSubstr("killed by signal 9"));
  Exit(second[1], job.job_id, 1, 0, 15, 1);
  EXPECT_EQ(IdleWorkers(), 2);
}

TEST_F(ClusterRestartTest, ARejectedConfigIsNotRestarted) {
  AddWorkers(2);
  const JobRecord job = SubmitRestartable(3);
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  Exit(ranks[0], job.job_id, 0, kTrainerExitRejected);
  const JobRecord failed = Get(job.job_id);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_THAT(failed.error->message, HasSubstr("not restarted: the trainer rejected the config"));
  EXPECT_EQ(failed.restart_count, 0);
}

TEST_F(ClusterRestartTest, ALostWorkerRestartsTheJobOnTheOthers) {
  AddWorkers(3);
  const JobRecord job = SubmitRestartable(1);
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  StartAll(job.job_id);
  Beat(absl::Milliseconds(350), ranks[1]);  // rank 1's worker stops answering
  cluster_->Tick();
  JobRecord restarting = Get(job.job_id);
  EXPECT_EQ(restarting.state, JobState::kRestarting);
  EXPECT_EQ(restarting.failures[0].cause, kCauseWorkerLost);
  Exit(ranks[0], job.job_id, 0, 0, 15);
  Beat(absl::Seconds(1), ranks[1]);
  cluster_->Tick();
  std::map<int, std::string> second = AssignedWorkers(job.job_id, 1);
  ASSERT_EQ(second.size(), 2u);
  for (const auto& [rank, w] : second) EXPECT_NE(w, ranks[1]) << "the lost worker is not used";
}

TEST_F(ClusterRestartTest, AnElasticRestartRunsOnFewerDataParallelRanksWithTheSameBatch) {
  AddWorkers(2);
  const JobRecord job = SubmitRestartable(1, /*dp=*/2, /*cp=*/1, 3, {"job.elastic=true"});
  EXPECT_EQ(job.degrees.world, 2);
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  StartAll(job.job_id);
  Beat(absl::Milliseconds(350), ranks[1]);  // one of the two workers is lost for good
  cluster_->Tick();
  EXPECT_EQ(Get(job.job_id).state, JobState::kRestarting);
  Exit(ranks[0], job.job_id, 0, kTrainerExitPeerLost);
  Beat(absl::Seconds(1), ranks[1]);
  cluster_->Tick();
  const JobRecord shrunk = Get(job.job_id);
  EXPECT_EQ(shrunk.state, JobState::kAssigned);
  EXPECT_EQ(shrunk.degrees.world, 1);
  EXPECT_EQ(shrunk.degrees.dp, 1);
  EXPECT_EQ(shrunk.degrees.cp, 1);
  // local_batch_size 2 × dp 2 = 4 samples a step, now as 2 micro-batches on one rank.
  EXPECT_THAT(shrunk.mesh_overrides, ElementsAre("parallelism.data_parallel_replicate_degree=1",
                                                 "parallelism.data_parallel_shard_degree=1",
                                                 "training.global_batch_size=4"));
  EXPECT_THAT(StateMessages(job.job_id, JobState::kAssigned).back(),
              HasSubstr("elastic: data parallel 2 -> 1 (world 2 -> 1, cp 1 kept); global batch 4 "
                        "kept as 2 micro-batches of 2 per rank"));
  std::map<int, std::string> second = AssignedWorkers(job.job_id, 1);
  ASSERT_EQ(second.size(), 1u);
  const v1::Assignment& a = Last(second[0]).assignment();
  EXPECT_EQ(a.world_size(), 1);
  EXPECT_EQ(a.overrides(a.overrides_size() - 1), "training.global_batch_size=4");
}

TEST_F(ClusterRestartTest, WithoutElasticARestartWaitsForAsManyWorkersAndThenFails) {
  AddWorkers(2);
  const JobRecord job = SubmitRestartable(1, 1, 2);
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  StartAll(job.job_id);
  Beat(absl::Milliseconds(350), ranks[1]);
  cluster_->Tick();
  Exit(ranks[0], job.job_id, 0, kTrainerExitPeerLost);
  Beat(absl::Seconds(1), ranks[1]);
  cluster_->Tick();
  EXPECT_EQ(Get(job.job_id).state, JobState::kRestarting);
  EXPECT_THAT(Get(job.job_id).wait_reason,
              HasSubstr("restart 1 of 1: the pool cannot hold it: needs 2 cpu workers, the pool "
                        "has 1"));
  Beat(absl::Seconds(5), ranks[1]);  // the fixture's unschedulable timeout
  cluster_->Tick();
  const JobRecord failed = Get(job.job_id);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_EQ(failed.error->cause, kCauseUnschedulable);
  EXPECT_THAT(failed.error->message, HasSubstr("FAILED_PRECONDITION"));
  ASSERT_EQ(failed.failures.size(), 2u);
  EXPECT_EQ(failed.failures[0].cause, kCauseWorkerLost);
}

TEST_F(ClusterRestartTest, AQueuedJobThePoolCannotHoldLetsOthersPassThenFails) {
  std::vector<std::string> workers = AddWorkers(3);
  const JobRecord running = *Submit(1, 2);
  const JobRecord big = *Submit(3, 1);  // needs all three workers: waits (FIFO) behind running
  const JobRecord small = *Submit(1, 1);
  EXPECT_EQ(Get(small.job_id).state, JobState::kQueued) << "FIFO: behind the big one";
  // The idle worker is lost: the pool has 2 workers, the big job can never start now.
  std::map<int, std::string> busy = AssignedWorkers(running.job_id);
  std::string idle;
  for (const std::string& w : workers) {
    if (w != busy[0] && w != busy[1]) idle = w;
  }
  Beat(absl::Milliseconds(350), idle);
  cluster_->Tick();
  EXPECT_EQ(Get(big.job_id).state, JobState::kQueued);
  EXPECT_THAT(Get(big.job_id).wait_reason,
              HasSubstr("the pool cannot hold it: needs 3 cpu workers, the pool has 2; later cpu "
                        "jobs may start meanwhile"));
  // The running job ends; the small job starts past the big one.
  for (const auto& [rank, w] : busy) Exit(w, running.job_id, rank, 0);
  EXPECT_EQ(Get(small.job_id).state, JobState::kAssigned);
  Beat(absl::Seconds(5), idle);
  cluster_->Tick();
  const JobRecord failed = Get(big.job_id);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_EQ(failed.error->cause, kCauseUnschedulable);
  EXPECT_THAT(failed.error->message,
              HasSubstr("FAILED_PRECONDITION: for 5s (--unschedulable-timeout) the pool could "
                        "not hold the job"));
}

TEST_F(ClusterRestartTest, CancelFreesTheWorkersInEveryState) {
  AddWorkers(2);
  // QUEUED behind a running job.
  const JobRecord running = SubmitRestartable(1);
  const JobRecord queued = *Submit(1, 2);
  EXPECT_EQ(cluster_->Cancel(queued.job_id)->state, JobState::kCancelled);
  // ASSIGNED: no rank has started; the agents answer the cancel with exits.
  std::map<int, std::string> ranks = AssignedWorkers(running.job_id);
  EXPECT_EQ(cluster_->Cancel(running.job_id)->state, JobState::kCancelled);
  for (const auto& [rank, w] : ranks) {
    ASSERT_TRUE(Last(w).has_cancel());
    Exit(w, running.job_id, rank, 0, 15);
  }
  EXPECT_EQ(IdleWorkers(), 2);
  // RUNNING.
  const JobRecord second = SubmitRestartable(1);
  ranks = AssignedWorkers(second.job_id);
  StartAll(second.job_id);
  EXPECT_EQ(cluster_->Cancel(second.job_id)->state, JobState::kCancelled);
  for (const auto& [rank, w] : ranks) Exit(w, second.job_id, rank, 0, 15);
  EXPECT_EQ(IdleWorkers(), 2);
  // RESTARTING, while the failed run's ranks are still stopping.
  const JobRecord third = SubmitRestartable(1);
  ranks = AssignedWorkers(third.job_id);
  StartAll(third.job_id);
  Exit(ranks[1], third.job_id, 1, 0, 9);
  EXPECT_EQ(Get(third.job_id).state, JobState::kRestarting);
  EXPECT_EQ(cluster_->Cancel(third.job_id)->state, JobState::kCancelled);
  Exit(ranks[0], third.job_id, 0, 0, 15);
  EXPECT_EQ(IdleWorkers(), 2);
  Beat(absl::Seconds(2));
  cluster_->Tick();
  EXPECT_EQ(Get(third.job_id).state, JobState::kCancelled) << "no restart after a cancel";
  EXPECT_TRUE(AssignedWorkers(third.job_id, 1).empty());
}

TEST_F(ClusterRestartTest, AMessageSentAgainIsTakenOnceAndARefusalSaysWhy) {
  AddWorkers(2);
  const JobRecord job = SubmitRestartable(0);
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  StartAll(job.job_id);
  v1::AgentMessage exit;
  exit.set_seq(7);
  exit.mutable_rank_exit()->set_job_id(job.job_id);
  exit.mutable_rank_exit()->set_rank(1);
  exit.mutable_rank_exit()->set_exit_status(0);
  EXPECT_EQ(Agent(ranks[1], exit), "");
  // The stream broke before the Ack: the agent writes it again; it is acknowledged, not applied.
  EXPECT_EQ(Agent(ranks[1], exit), "");
  EXPECT_EQ(cluster_->GetCounts().refused_agent_messages_by_reason["not_assigned"], 0);
  // A new message for a rank the worker no longer runs is refused with the reason.
  exit.set_seq(8);
  EXPECT_THAT(Agent(ranks[1], exit), HasSubstr("which is not assigned to it (it runs nothing)"));
  // A stderr tail that is not UTF-8 is stored as valid text.
  v1::AgentMessage bad_tail;
  bad_tail.set_seq(3);
  bad_tail.mutable_rank_exit()->set_job_id(job.job_id);
  bad_tail.mutable_rank_exit()->set_rank(0);
  bad_tail.mutable_rank_exit()->set_exit_status(1);
  bad_tail.mutable_rank_exit()->set_stderr_tail("cut \xe6\x97");
  EXPECT_EQ(Agent(ranks[0], bad_tail), "");
  EXPECT_EQ(Get(job.job_id).error->stderr_tail, "cut \xef\xbf\xbd\xef\xbf\xbd");
}

TEST_F(ClusterRestartTest, AReattachedSessionGetsItsUnstartedAssignmentAgain) {
  AddWorkers(2);
  const JobRecord job = SubmitRestartable(0);
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  Started(ranks[0], job.job_id, 0);
  // Rank 1's stream broke right after the assignment was written: it may be lost.
  cluster_->DetachSession(ranks[1], &channels_[ranks[1]]);
  channels_[ranks[1]].sent.clear();
  ASSERT_TRUE(cluster_->AttachSession(ranks[1], credentials_[ranks[1]], &channels_[ranks[1]]).ok());
  ASSERT_EQ(channels_[ranks[1]].sent.size(), 2u);
  EXPECT_TRUE(channels_[ranks[1]].sent[0].has_welcome());
  EXPECT_EQ(channels_[ranks[1]].sent[1].assignment().rank(), 1);
  // Rank 0 has started: its worker gets nothing again.
  cluster_->DetachSession(ranks[0], &channels_[ranks[0]]);
  channels_[ranks[0]].sent.clear();
  ASSERT_TRUE(cluster_->AttachSession(ranks[0], credentials_[ranks[0]], &channels_[ranks[0]]).ok());
  EXPECT_EQ(channels_[ranks[0]].sent.size(), 1u);
}

TEST_F(ClusterRestartTest, ARestartingJobResumesAfterACoordinatorRestart) {
  std::vector<std::string> workers = AddWorkers(2);
  const JobRecord job = SubmitRestartable(1);
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  StartAll(job.job_id);
  Exit(ranks[1], job.job_id, 1, 0, 9);
  ASSERT_EQ(Get(job.job_id).state, JobState::kRestarting);
  channels_.clear();
  Reopen();
  EXPECT_EQ(Get(job.job_id).state, JobState::kRestarting);
  std::vector<std::string> fresh = AddWorkers(2);
  cluster_->Tick();
  EXPECT_EQ(Get(job.job_id).state, JobState::kRestarting) << "agents get adopt_timeout first";
  Beat(absl::Seconds(1));
  cluster_->Tick();
  EXPECT_EQ(Get(job.job_id).state, JobState::kAssigned);
  EXPECT_EQ(AssignedWorkers(job.job_id, 1).size(), 2u);
}

// A cp-2 job with in-memory snapshots, rank 1 killed while the coordinator was away: the new
// coordinator heals it once both agents are back, whichever registers first (rank 1's agent,
// adopted and then reporting the kill, used to end adoption without deciding the held failure).
class HealAfterRestartTest : public ClusterRestartTest,
                             public ::testing::WithParamInterface<bool> {};

TEST_P(HealAfterRestartTest, ARankLostWhileTheCoordinatorWasAwayIsHealedOnceEveryRankIsBack) {
  const bool lost_rank_first = GetParam();
  AddWorkers(3);
  const JobRecord job = SubmitRestartable(2, 1, 2, 8, {"checkpoint.memory_interval=3"});
  std::map<int, std::string> ranks = AssignedWorkers(job.job_id);
  StartAll(job.job_id);
  for (int step = 1; step <= 4; ++step) {
    v1::AgentMessage m;
    m.mutable_rank_report()->set_job_id(job.job_id);
    m.mutable_rank_report()->set_record_json(
        "{\"step\": " + std::to_string(step) + ", \"loss\": 2.5, \"snapshot_step\": " +
        std::to_string(step >= 3 ? 3 : 0) + ", \"snapshot_buddy_offset\": 1}");
    ASSERT_EQ(Agent(ranks[0], m), "");
  }
  channels_.clear();
  Reopen();
  if (lost_rank_first) {
    ComeBack(ranks[1], job.job_id, 1);
    Exit(ranks[1], job.job_id, 1, 0, 9);
    EXPECT_TRUE(Get(job.job_id).failures.empty()) << "held until rank 0 is back";
    ComeBack(ranks[0], job.job_id, 0);
  } else {
    ComeBack(ranks[0], job.job_id, 0);
    ComeBack(ranks[1], job.job_id, 1);
    Exit(ranks[1], job.job_id, 1, 0, 9);
  }
  const JobRecord healed = Get(job.job_id);
  ASSERT_EQ(healed.failures.size(), 1u);
  EXPECT_EQ(healed.failures[0].rank, 1);
  EXPECT_EQ(healed.failures[0].recovery, "healed");
  EXPECT_EQ(healed.state, JobState::kRunning);
  EXPECT_EQ(healed.restart_count, 0);
  bool survivor_told = false;
  for (const v1::CoordinatorMessage& m : channels_[ranks[0]].sent) survivor_told |= m.has_heal();
  EXPECT_TRUE(survivor_told) << "rank 0 keeps its process and is told to heal";
}

INSTANTIATE_TEST_SUITE_P(EitherAgentFirst, HealAfterRestartTest, ::testing::Bool());

}  // namespace
}  // namespace ringtrain
