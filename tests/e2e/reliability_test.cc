// Failures on a real local cluster (a real coordinator, real agents, real trainers on 127.0.0.1)
// and what the restart policy makes of them: a trainer killed, a trainer stopped (hung), an agent
// killed, each followed by a restart from the job's latest checkpoint whose losses are bitwise
// those of an uninterrupted run (ringtrain-run of the same config); an elastic restart from dp 2
// to dp 1 with the same global batch; a restart budget that runs out; a stderr tail cut inside a
// UTF-8 character; cancel while restarting; a queue whose head the pool can no longer hold; and a
// coordinator killed mid-job. Each TEST starts its own cluster; the agents share one checkpoint
// root (what the Kubernetes manifests' shared volume is), so a restarted run finds the checkpoint
// wherever its rank 0 lands. Times are printed so the CI log shows each failure's cost.
#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/printable.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reliability_util.h"

namespace ringtrain::testing {
namespace {

using ::testing::HasSubstr;

TEST_F(ReliabilityTest, AKilledTrainerRestartsFromTheCheckpointAndMatchesBitwise) {
  std::unique_ptr<LocalCluster> cluster = Start(2);
  const std::vector<std::string> job_overrides = Restartable(1, 2, 2);
  const Underway u = SubmitAndRunTo(*cluster, job_overrides, /*rank=*/1);
  ASSERT_GT(u.trainer, 0);
  const v1::Job& job = u.job;
  const Clock::time_point killed = Clock::now();
  kill(u.trainer, SIGKILL);
  const RecoveryTimes t = WatchRecovery(*cluster, job.job_id(), u.step, killed, 120);
  const v1::Job done = Succeeded(*cluster, job.job_id());
  EXPECT_EQ(done.restart_count(), 1);
  ASSERT_EQ(done.failures_size(), 1);
  EXPECT_EQ(done.failures(0).cause(), "rank_exit");
  EXPECT_EQ(done.failures(0).rank(), 1);
  EXPECT_EQ(done.failures(0).exit_status(), 128 + SIGKILL);
  EXPECT_THAT(done.failures(0).message(), HasSubstr("killed by signal 9"));
  const int resumed_after =
      ExpectBitwiseResume(*cluster, job.job_id(), 2, Uninterrupted(*cluster, 2, job_overrides));
  EXPECT_EQ(resumed_after % 5, 0) << "a run resumes from a checkpoint (every 5 steps)";
  PrintRecovery("trainer SIGKILL", t, u.step, resumed_after);
  // ringctl shows the restart and its cause.
  CommandResult get =
      RunCommand({BinDir() + "/ringctl", "get", job.job_id(), "--coordinator", cluster->address()});
  EXPECT_THAT(get.output, HasSubstr("restarts     1 of 2"));
  EXPECT_THAT(get.output, HasSubstr("rank_exit: rank 1 on"));
  EXPECT_THAT(HttpGet(cluster->coordinator_metrics(), "/metrics"),
              HasSubstr("ringtrain_coordinator_job_restarts_total{cause=\"rank_exit\"} 1"));
}

TEST_F(ReliabilityTest, AStoppedTrainerIsFoundHungNamedAndRestarted) {
  std::unique_ptr<LocalCluster> cluster = Start(2);
  // comm.timeout_seconds 15: the agent's heartbeat check (silent for min(15, 10) = 10 s) finds
  // the stopped rank before its peer's collective times out.
  const std::vector<std::string> job_overrides = Restartable(1, 2, 1, /*comm_timeout=*/15);
  const Underway u = SubmitAndRunTo(*cluster, job_overrides, /*rank=*/1);
  ASSERT_GT(u.trainer, 0);
  const Clock::time_point stopped = Clock::now();
  kill(u.trainer, SIGSTOP);
  const RecoveryTimes t = WatchRecovery(*cluster, u.job.job_id(), u.step, stopped, 120);
  EXPECT_GT(t.detected, 0);
  EXPECT_LT(t.detected, 15 + 5) << "within comm.timeout_seconds plus a few seconds";
  const v1::Job done = Succeeded(*cluster, u.job.job_id());
  ASSERT_EQ(done.failures_size(), 1);
  EXPECT_EQ(done.failures(0).cause(), "rank_hung");
  EXPECT_EQ(done.failures(0).rank(), 1) << "the stopped rank, not the survivor that noticed";
  EXPECT_THAT(done.failures(0).message(), HasSubstr("is hung: no heartbeat from the trainer"));
  EXPECT_FALSE(IsRunning(u.trainer)) << "the stopped trainer was killed";
  const int resumed_after =
      ExpectBitwiseResume(*cluster, u.job.job_id(), 2, Uninterrupted(*cluster, 2, job_overrides));
  PrintRecovery("trainer SIGSTOP", t, u.step, resumed_after);
}

// The agent-restart and coordinator-restart cases run in plaintext and as deployed beyond
// loopback (TLS, client tokens, join tokens), where an agent reaches its coordinator again through
// a TLS channel.
class ProtectedReliabilityTest : public ReliabilityTest,
                                 public ::testing::WithParamInterface<Protection> {};

std::string ProtectionName(const ::testing::TestParamInfo<Protection>& info) {
  return info.param == Protection::kPlaintext ? "Plaintext" : "TlsAndTokens";
}

TEST_P(ProtectedReliabilityTest, AKilledAgentTakesItsTrainerAndTheJobRestartsOnTheOthers) {
  std::unique_ptr<LocalCluster> cluster = Start(3, {}, {}, GetParam());
  const std::vector<std::string> job_overrides = Restartable(1, 2, 1);
  const Underway u = SubmitAndRunTo(*cluster, job_overrides, /*rank=*/1);
  ASSERT_GT(u.trainer, 0);
  const int agent = cluster->WorkerOfProcess(u.trainer);
  ASSERT_GE(agent, 0);
  const Clock::time_point killed = Clock::now();
  cluster->SignalWorker(agent, SIGKILL);
  // Its trainer dies with it: no orphan keeps training.
  EXPECT_TRUE(WaitFor([&] { return !IsRunning(u.trainer); }, 3))
      << "the trainer outlived its agent";
  std::printf("agent SIGKILL -> its trainer gone: %.2f s\n", SecondsSince(killed));
  const RecoveryTimes t = WatchRecovery(*cluster, u.job.job_id(), u.step, killed, 120);
  const v1::Job done = Succeeded(*cluster, u.job.job_id());
  ASSERT_EQ(done.failures_size(), 1);
  EXPECT_EQ(done.failures(0).cause(), "worker_lost");
  EXPECT_EQ(done.failures(0).rank(), 1);
  const std::string lost = done.failures(0).worker_id();
  for (const auto& p : done.mesh()) EXPECT_NE(p.worker_id(), lost) << "the lost worker ran again";
  const int resumed_after =
      ExpectBitwiseResume(*cluster, u.job.job_id(), 3, Uninterrupted(*cluster, 2, job_overrides));
  PrintRecovery("agent SIGKILL", t, u.step, resumed_after);
}

TEST_F(ReliabilityTest, AnElasticRestartRunsOnOneReplicaWithTheSameGlobalBatch) {
  std::unique_ptr<LocalCluster> cluster = Start(2);
  std::vector<std::string> job_overrides = Restartable(2, 1, 1);
  job_overrides.push_back("job.elastic=true");
  const Underway u = SubmitAndRunTo(*cluster, job_overrides, /*rank=*/1);
  ASSERT_GT(u.trainer, 0);
  const v1::Job& job = u.job;
  const Clock::time_point killed = Clock::now();
  cluster->SignalWorker(cluster->WorkerOfProcess(u.trainer), SIGKILL);  // one worker remains
  const RecoveryTimes t = WatchRecovery(*cluster, job.job_id(), u.step, killed, 120);
  const v1::Job done = Succeeded(*cluster, job.job_id());
  EXPECT_EQ(done.world_size(), 1);
  EXPECT_EQ(done.dp(), 1);
  EXPECT_THAT(done.mesh_overrides(), ::testing::Contains("training.global_batch_size=16"));
  // The event stream says what changed.
  bool said = false;
  std::string assigned;
  for (const v1::JobEvent& e : cluster->Watch(job.job_id(), kSteps + 1, 30)) {
    if (e.has_state_change() && e.state_change().to_state() == v1::JOB_STATE_ASSIGNED) {
      assigned += e.state_change().message() + "\n";
      said |= e.state_change().message().find(
                  "elastic: data parallel 2 -> 1 (world 2 -> 1, cp 1 kept); global batch 16 "
                  "kept as 2 micro-batches of 8 per rank") != std::string::npos;
    }
  }
  EXPECT_TRUE(said) << "no ASSIGNED state change names the elastic mesh:\n" << assigned;
  // dp 1 × 2 micro-batches sums the same samples in another order: within 1e-6 a step of the
  // uninterrupted dp-2 run, and bitwise before the failure.
  const std::vector<std::map<std::string, std::string>> expected =
      Uninterrupted(*cluster, 2, job_overrides);
  const std::vector<std::string> stored = StoredRecords(*cluster, job.job_id());
  ASSERT_EQ(stored.size(), static_cast<size_t>(kSteps));
  double worst = 0;
  for (size_t i = 0; i < stored.size(); ++i) {
    const double diff =
        std::abs(std::stod(RawField(stored[i], "loss")) - std::stod(expected.at(i).at("loss")));
    worst = std::max(worst, diff);
    EXPECT_LE(diff, 1e-6) << "step " << i + 1;
  }
  std::vector<std::map<std::string, std::string>> last = LastRunRecords(*cluster, job.job_id(), 2);
  ASSERT_FALSE(last.empty());
  for (auto& record : last) {
    const int step = std::stoi(record["step"]);
    const double diff =
        std::abs(std::stod(record["loss"]) - std::stod(expected.at(step - 1).at("loss")));
    worst = std::max(worst, diff);
    EXPECT_LE(diff, 1e-6) << "dp-1 run, step " << step;
  }
  std::printf("elastic dp 2 -> 1: max |loss - uninterrupted dp 2| = %.3g\n", worst);
  PrintRecovery("elastic (agent SIGKILL)", t, u.step, std::stoi(last.front()["step"]) - 1);
}

TEST_F(ReliabilityTest, WhenTheRestartsRunOutTheJobFailsListingEveryCause) {
  std::unique_ptr<LocalCluster> cluster = Start(2);
  v1::Job job = cluster->Submit(ConfigPath("debug_model.toml"), Restartable(1, 2, 1));
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(cluster->WaitForJob(
        job.job_id(),
        [&](const v1::Job& j) {
          return j.restart_count() == run && j.state() == v1::JOB_STATE_RUNNING &&
                 j.last_step() >= 7;
        },
        180, "running past step 7"));
    const pid_t victim = cluster->TrainerPid(job.job_id(), run == 0 ? 1 : 0);
    ASSERT_GT(victim, 0);
    kill(victim, SIGKILL);
  }
  ASSERT_TRUE(cluster->WaitForJob(job.job_id(), IsFinal, 60, "end"));
  const v1::Job failed = cluster->Get(job.job_id());
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  ASSERT_EQ(failed.failures_size(), 2);
  EXPECT_EQ(failed.failures(0).rank(), 1);
  EXPECT_EQ(failed.failures(1).rank(), 0);
  EXPECT_EQ(failed.error().rank(), 0);
  EXPECT_THAT(failed.error().message(), HasSubstr("no restarts left (1 of job.max_restarts = 1 "
                                                  "used); earlier failures: run 1: rank 1 on"));
  CommandResult get =
      RunCommand({BinDir() + "/ringctl", "get", job.job_id(), "--coordinator", cluster->address()});
  EXPECT_THAT(get.output, HasSubstr("1. "));
  EXPECT_THAT(get.output, HasSubstr("was killed by signal 9 -> restarted from storage"));
  EXPECT_THAT(get.output, HasSubstr("2. "));
  EXPECT_TRUE(cluster->WaitForIdleWorkers(2, 15)) << cluster->Logs();
}

TEST_F(ReliabilityTest, CancelWhileRestartingFreesEveryWorker) {
  std::unique_ptr<LocalCluster> cluster = Start(2);
  std::vector<std::string> job_overrides = Restartable(1, 2, 3);
  job_overrides.push_back("job.restart_backoff_seconds=600");  // it stays RESTARTING
  v1::Job job = cluster->Submit(ConfigPath("debug_model.toml"), job_overrides);
  v1::Job queued = cluster->Submit(ConfigPath("debug_model.toml"), Restartable(1, 2, 0));
  ASSERT_TRUE(cluster->WaitForJob(
      job.job_id(), [](const v1::Job& j) { return j.last_step() >= 2; }, 180, "step 2"));
  kill(cluster->TrainerPid(job.job_id(), 0), SIGKILL);
  ASSERT_TRUE(cluster->WaitForJob(
      job.job_id(), [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RESTARTING; }, 30,
      "RESTARTING"));
  EXPECT_EQ(cluster->Get(queued.job_id()).state(), v1::JOB_STATE_QUEUED)
      << "a restarting job keeps its place ahead of the queue";
  for (const std::string& id : {queued.job_id(), job.job_id()}) {
    CommandResult cancel =
        RunCommand({BinDir() + "/ringctl", "cancel", id, "--coordinator", cluster->address()});
    EXPECT_EQ(cancel.exit_code, 0) << cancel.output;
    EXPECT_EQ(cluster->Get(id).state(), v1::JOB_STATE_CANCELLED);
  }
  EXPECT_TRUE(cluster->WaitForIdleWorkers(2, 15)) << cluster->Logs();
  EXPECT_EQ(cluster->TrainerPid(job.job_id(), 1), -1);
}

// A trainer whose stderr tail cannot be cut on a byte count without splitting a character, and
// that prints raw bytes: the exit still reaches the coordinator, the job fails (not RUNNING
// forever), its tail reads as valid UTF-8, and the workers are free.
TEST_F(ReliabilityTest, AStderrTailCutInsideAUtf8CharacterStillEndsTheJob) {
  TempDir scripts;
  const std::string trainer = scripts / "trainer.sh";
  WriteFile(trainer,
            "#!/bin/sh\n"
            "printf '%4095s' '' | tr ' ' a >&2\n"
            "printf '\\346\\227\\245 after the cut\\n' >&2\n"
            "printf 'raw \\377\\376 bytes\\n' >&2\n"
            "exit 1\n");
  std::filesystem::permissions(trainer, std::filesystem::perms::owner_all);
  std::unique_ptr<LocalCluster> cluster = Start(2, {}, {"--trainer", trainer});
  v1::Job job = cluster->Submit(ConfigPath("debug_model.toml"), Restartable(1, 2, 0));
  ASSERT_TRUE(cluster->WaitForJob(job.job_id(), IsFinal, 60, "end"));
  const v1::Job failed = cluster->Get(job.job_id());
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED) << cluster->Logs();
  const std::string& tail = failed.error().stderr_tail();
  EXPECT_EQ(ValidUtf8(tail), tail);
  EXPECT_THAT(tail, HasSubstr("raw "));
  EXPECT_THAT(tail, HasSubstr(" bytes"));
  EXPECT_TRUE(cluster->WaitForIdleWorkers(2, 15)) << cluster->Logs();
  CommandResult get =
      RunCommand({BinDir() + "/ringctl", "get", job.job_id(), "--coordinator", cluster->address()});
  EXPECT_EQ(get.exit_code, 0) << get.output;
}

// The head of the queue needs three workers; one of three is lost for good. The job behind it
// starts, and the head fails with FAILED_PRECONDITION after --unschedulable-timeout.
TEST_F(ReliabilityTest, AQueueHeadThePoolCanNoLongerHoldDoesNotJamTheQueue) {
  std::unique_ptr<LocalCluster> cluster = Start(3, {"--unschedulable-timeout=5"});
  std::vector<std::string> short_job = Restartable(1, 2, 0);
  short_job.push_back("training.steps=16");
  v1::Job running = cluster->Submit(ConfigPath("debug_model.toml"), short_job);
  ASSERT_TRUE(cluster->WaitForJob(
      running.job_id(), [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING; }, 60,
      "RUNNING"));
  v1::Job big = cluster->Submit(ConfigPath("debug_model.toml"), Restartable(3, 1, 0));
  v1::Job small = cluster->Submit(ConfigPath("debug_model.toml"), Restartable(1, 1, 0));
  // The one agent the running job does not use dies.
  std::set<int> busy;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t trainer = cluster->TrainerPid(running.job_id(), rank);
    ASSERT_GT(trainer, 0);
    busy.insert(cluster->WorkerOfProcess(trainer));
  }
  ASSERT_EQ(busy.size(), 2u);
  int idle = 0;
  while (busy.count(idle) != 0) ++idle;
  cluster->SignalWorker(idle, SIGKILL);
  ASSERT_TRUE(cluster->WaitForJob(small.job_id(), IsFinal, 180, "end"));
  EXPECT_EQ(cluster->Get(small.job_id()).state(), v1::JOB_STATE_SUCCEEDED)
      << "the job behind the unfit head ran";
  ASSERT_TRUE(cluster->WaitForJob(big.job_id(), IsFinal, 60, "end"));
  const v1::Job failed = cluster->Get(big.job_id());
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed.error().cause(), "unschedulable");
  EXPECT_THAT(failed.error().message(), HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(failed.error().message(), HasSubstr("needs 3 cpu workers, the pool has 2"));
}

TEST_P(ProtectedReliabilityTest, ACoordinatorKilledMidJobStillEndsWithEveryStepOnce) {
  std::unique_ptr<LocalCluster> cluster = Start(2, {}, {}, GetParam());
  const std::vector<std::string> job_overrides = Restartable(1, 2, 0);
  const Underway u = SubmitAndRunTo(*cluster, job_overrides, /*rank=*/0, /*step=*/5);
  const v1::Job& job = u.job;
  const Clock::time_point killed = Clock::now();
  cluster->RestartCoordinator(SIGKILL);
  // Back within their heartbeat timeout (--worker-timeout=4 here) of the coordinator's return.
  ASSERT_TRUE(WaitFor([&] { return cluster->Workers().size() == 2; }, 30)) << cluster->Logs();
  std::printf("coordinator SIGKILL -> both agents back: %.2f s\n", SecondsSince(killed));
  const int64_t seen = cluster->Get(job.job_id()).last_step();
  ASSERT_TRUE(StepsOnOrEnds(*cluster, job.job_id(), seen));
  std::printf("coordinator SIGKILL -> the job's next step or end (step %lld seen): %.2f s\n",
              static_cast<long long>(seen), SecondsSince(killed));
  const v1::Job done = Succeeded(*cluster, job.job_id());
  EXPECT_EQ(done.restart_count(), 0) << "the ranks were re-adopted, not restarted";
  const std::vector<std::map<std::string, std::string>> expected =
      Uninterrupted(*cluster, 2, job_overrides);
  const std::vector<std::string> stored = StoredRecords(*cluster, job.job_id());
  ASSERT_EQ(stored.size(), static_cast<size_t>(kSteps));
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(RawField(stored[i], "step"), std::to_string(i + 1));
    EXPECT_EQ(RawField(stored[i], "loss"), expected.at(i).at("loss")) << "step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Protections, ProtectedReliabilityTest,
                         ::testing::Values(Protection::kPlaintext, Protection::kTlsAndTokens),
                         ProtectionName);

}  // namespace
}  // namespace ringtrain::testing
