// Healing in place on a real local cluster (checkpoint.memory_interval): a cp 2 job on 3 workers
// loses rank 1 — its trainer killed, its agent killed, or its trainer stopped (hung) — and is
// healed from the in-memory snapshots: the lost rank's replacement takes its state from its
// buddy's memory, the surviving trainer keeps its process, no storage checkpoint exists, and every
// stored step is bitwise the step of an uninterrupted run. When the rank and its buddy are both
// lost, the job falls back to a restart from the storage checkpoint, bitwise too. Times are
// printed so the CI log shows what a heal costs.
#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/printable.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reliability_util.h"

namespace ringtrain::testing {
namespace {

using ::testing::HasSubstr;

// The debug config, cp 2 (times `dp` replicas), snapshots every 3 steps and no storage checkpoint
// at all.
std::vector<std::string> Healable(double comm_timeout = 10, int dp = 1) {
  std::vector<std::string> o = Restartable(dp, 2, /*max_restarts=*/2, comm_timeout);
  o.push_back("checkpoint.enable=false");
  o.push_back("checkpoint.memory_interval=3");
  return o;
}

// The uninterrupted run to compare with takes no snapshots: they must not change a number.
std::vector<std::string> WithoutSnapshots(std::vector<std::string> job) {
  job.push_back("checkpoint.memory_interval=0");
  return job;
}

// Every stored step once, in order, each bitwise the uninterrupted run's; and rank 0's own
// records on the worker that ran it throughout: from step 1 (it never restarted), the steps
// after the snapshot it rolled back to recorded twice, the same both times.
void ExpectBitwiseHeal(LocalCluster& cluster, const std::string& job_id,
                       const std::vector<std::map<std::string, std::string>>& expected,
                       int workers = 3) {
  const std::vector<std::string> stored = StoredRecords(cluster, job_id);
  ASSERT_EQ(stored.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(RawField(stored[i], "step"), std::to_string(i + 1));
    EXPECT_EQ(RawField(stored[i], "loss"), expected[i].at("loss")) << "step " << i + 1;
  }
  std::vector<std::map<std::string, std::string>> own;
  for (int i = 0; i < workers; ++i) {
    const std::string path = cluster.work_dir(i) + "/" + job_id + "/rank-0/metrics.jsonl";
    std::vector<std::map<std::string, std::string>> records = ReadJsonl(path);
    if (!records.empty()) own = records;
  }
  ASSERT_FALSE(own.empty());
  EXPECT_EQ(own.front().at("step"), "1") << "rank 0 never restarted";
  EXPECT_GT(own.size(), static_cast<size_t>(kSteps)) << "the rolled-back steps ran again";
  for (const auto& record : own) {
    const int step = std::stoi(record.at("step"));
    EXPECT_EQ(record.at("loss"), expected.at(step - 1).at("loss")) << "rank 0's step " << step;
  }
}

// The job healed once from `cause`, with its replacement (on the spare worker unless
// `any_worker`: the lost rank's own worker may take it too) and time kept; no restart.
void ExpectHealed(const v1::Job& done, const std::string& cause, bool any_worker = false) {
  ASSERT_EQ(done.failures_size(), 1) << done.ShortDebugString();
  const v1::JobError& f = done.failures(0);
  EXPECT_EQ(f.cause(), cause);
  EXPECT_EQ(f.rank(), 1);
  EXPECT_EQ(f.recovery(), "healed");
  EXPECT_FALSE(f.replacement_worker_id().empty());
  if (!any_worker) {
    EXPECT_NE(f.replacement_worker_id(), f.worker_id()) << "the spare took the rank";
  }
  EXPECT_GT(f.recovery_seconds(), 0);
  EXPECT_EQ(done.restart_count(), 0) << "no restart from storage";
  EXPECT_EQ(done.mesh(1).worker_id(), f.replacement_worker_id());
}

// How long after `start` the job trained past `step` again.
double TrainingAgain(LocalCluster& cluster, const std::string& job_id, int64_t step,
                     Clock::time_point start) {
  double seconds = -1;
  cluster.WaitForJob(
      job_id,
      [&](const v1::Job& j) {
        if (j.last_step() > step) seconds = SecondsSince(start);
        return seconds >= 0 || IsFinal(j);
      },
      120, "training again after the heal");
  return seconds;
}

class HealInPlaceTest : public ReliabilityTest {
 protected:
  // Four ranks on five workers: rank 1's trainer is killed and healed on the spare, its state
  // coming from rank 3 (the same place in the other FSDP group or replica).
  void HealFourRanks(const std::vector<std::string>& job, const std::string& mesh) {
    std::unique_ptr<LocalCluster> cluster = Start(5);
    const Underway u = SubmitAndRunTo(*cluster, job, /*rank=*/1);
    ASSERT_GT(u.trainer, 0);
    std::vector<pid_t> survivors;
    for (int rank : {0, 2, 3}) survivors.push_back(cluster->TrainerPid(u.job.job_id(), rank));
    const Clock::time_point killed = Clock::now();
    kill(u.trainer, SIGKILL);
    const double again = TrainingAgain(*cluster, u.job.job_id(), u.step, killed);
    int i = 0;
    for (int rank : {0, 2, 3}) {
      EXPECT_EQ(cluster->TrainerPid(u.job.job_id(), rank), survivors[size_t(i++)])
          << "rank " << rank << " kept its process";
    }
    const v1::Job done = Succeeded(*cluster, u.job.job_id());
    ExpectHealed(done, "rank_exit");
    ExpectBitwiseHeal(*cluster, u.job.job_id(), Uninterrupted(*cluster, 4, WithoutSnapshots(job)),
                      5);
    std::printf("%s, trainer SIGKILL -> healed in place: training again after %.2f s\n",
                mesh.c_str(), again);
  }
};

TEST_F(HealInPlaceTest, AKilledTrainerIsHealedFromMemoryTheSurvivorKeepsItsProcessBitwise) {
  std::unique_ptr<LocalCluster> cluster = Start(3);
  const std::vector<std::string> job = Healable();
  const Underway u = SubmitAndRunTo(*cluster, job, /*rank=*/1);
  ASSERT_GT(u.trainer, 0);
  const pid_t survivor = cluster->TrainerPid(u.job.job_id(), 0);
  ASSERT_GT(survivor, 0);
  const Clock::time_point killed = Clock::now();
  kill(u.trainer, SIGKILL);
  const double again = TrainingAgain(*cluster, u.job.job_id(), u.step, killed);
  EXPECT_EQ(cluster->TrainerPid(u.job.job_id(), 0), survivor) << "rank 0 kept its process";
  const v1::Job done = Succeeded(*cluster, u.job.job_id());
  ExpectHealed(done, "rank_exit");
  EXPECT_THAT(done.failures(0).message(), HasSubstr("killed by signal 9"));
  ExpectBitwiseHeal(*cluster, u.job.job_id(), Uninterrupted(*cluster, 2, WithoutSnapshots(job)));
  EXPECT_THAT(HttpGet(cluster->coordinator_metrics(), "/metrics"),
              HasSubstr("ringtrain_coordinator_job_heals_total{cause=\"rank_exit\"} 1"));
  const CommandResult get = cluster->Ringctl({"get", u.job.job_id()});
  EXPECT_THAT(get.output, HasSubstr("healed in place: rank 1 on "));
  std::printf(
      "trainer SIGKILL -> healed in place: training past step %lld again after %.2f s "
      "(the coordinator measured %.2f s from the failure)\n",
      static_cast<long long>(u.step), again, done.failures(0).recovery_seconds());
}

TEST_F(HealInPlaceTest, AKilledAgentsRankIsHealedOnTheSpareWorker) {
  std::unique_ptr<LocalCluster> cluster = Start(3);
  const std::vector<std::string> job = Healable();
  const Underway u = SubmitAndRunTo(*cluster, job, /*rank=*/1);
  ASSERT_GT(u.trainer, 0);
  const pid_t survivor = cluster->TrainerPid(u.job.job_id(), 0);
  const int agent = cluster->WorkerOfProcess(u.trainer);
  ASSERT_GE(agent, 0);
  const Clock::time_point killed = Clock::now();
  cluster->SignalWorker(agent, SIGKILL);
  const double again = TrainingAgain(*cluster, u.job.job_id(), u.step, killed);
  EXPECT_EQ(cluster->TrainerPid(u.job.job_id(), 0), survivor) << "rank 0 kept its process";
  const v1::Job done = Succeeded(*cluster, u.job.job_id());
  ExpectHealed(done, "worker_lost");
  ExpectBitwiseHeal(*cluster, u.job.job_id(), Uninterrupted(*cluster, 2, WithoutSnapshots(job)));
  std::printf("agent SIGKILL -> healed in place: training again after %.2f s\n", again);
}

TEST_F(HealInPlaceTest, AStoppedTrainerIsFoundHungAndHealedInPlace) {
  std::unique_ptr<LocalCluster> cluster = Start(3);
  const std::vector<std::string> job = Healable(/*comm_timeout=*/15);
  const Underway u = SubmitAndRunTo(*cluster, job, /*rank=*/1);
  ASSERT_GT(u.trainer, 0);
  const pid_t survivor = cluster->TrainerPid(u.job.job_id(), 0);
  const Clock::time_point stopped = Clock::now();
  kill(u.trainer, SIGSTOP);
  const double again = TrainingAgain(*cluster, u.job.job_id(), u.step, stopped);
  EXPECT_EQ(cluster->TrainerPid(u.job.job_id(), 0), survivor) << "rank 0 kept its process";
  const v1::Job done = Succeeded(*cluster, u.job.job_id());
  ExpectHealed(done, "rank_hung");
  EXPECT_TRUE(WaitFor([&] { return !IsRunning(u.trainer); }, 30)) << "the hung trainer was stopped";
  ExpectBitwiseHeal(*cluster, u.job.job_id(), Uninterrupted(*cluster, 2, WithoutSnapshots(job)));
  std::printf("trainer SIGSTOP -> healed in place: training again after %.2f s\n", again);
}

TEST_F(HealInPlaceTest, FsdpShard2Cp2HealsARankFromTheOtherShardGroupsMemory) {
  std::vector<std::string> job = Healable();
  job.push_back("parallelism.data_parallel_shard_degree=2");
  HealFourRanks(job, "FSDP shard 2 x cp 2");
}

TEST_F(HealInPlaceTest, Dp2Cp2HealsARankFromTheOtherReplicasMemory) {
  HealFourRanks(Healable(/*comm_timeout=*/10, /*dp=*/2), "dp 2 x cp 2");
}

TEST_F(HealInPlaceTest, ACoordinatorRestartedDuringAHealLosesNothing) {
  std::unique_ptr<LocalCluster> cluster = Start(3);
  const std::vector<std::string> job = Healable();
  const Underway u = SubmitAndRunTo(*cluster, job, /*rank=*/1);
  ASSERT_GT(u.trainer, 0);
  const pid_t survivor = cluster->TrainerPid(u.job.job_id(), 0);
  kill(u.trainer, SIGKILL);
  // The heal is issued (the failure says how the job goes on); the replacement is still starting.
  ASSERT_TRUE(WaitFor(
      [&] {
        const v1::Job j = cluster->Get(u.job.job_id());
        return j.failures_size() == 1 && j.failures(0).recovery() == "healed";
      },
      60));
  cluster->RestartCoordinator(SIGKILL);
  TrainingAgain(*cluster, u.job.job_id(), u.step, Clock::now());
  EXPECT_EQ(cluster->TrainerPid(u.job.job_id(), 0), survivor) << "rank 0 kept its process";
  const v1::Job done = Succeeded(*cluster, u.job.job_id());
  ExpectHealed(done, "rank_exit");
  ExpectBitwiseHeal(*cluster, u.job.job_id(), Uninterrupted(*cluster, 2, WithoutSnapshots(job)));
}

// The lost rank's agent may come back before or after the survivor's: both orders are decided
// once every rank is back (a rank adopted and then found exited counts as back).
TEST_F(HealInPlaceTest, ARankLostWhileTheCoordinatorIsAwayIsHealedWhenItReturns) {
  std::unique_ptr<LocalCluster> cluster = Start(3);
  const std::vector<std::string> job = Healable();
  const Underway u = SubmitAndRunTo(*cluster, job, /*rank=*/1);
  ASSERT_GT(u.trainer, 0);
  const pid_t survivor = cluster->TrainerPid(u.job.job_id(), 0);
  cluster->StopCoordinator(SIGKILL);
  kill(u.trainer, SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return !IsRunning(u.trainer); }, 10));
  // The new coordinator knows the heal point from the last stored record, and decides once
  // every rank's agent is back (whichever comes first, the lost rank's may be the only idle one).
  cluster->StartCoordinator();
  TrainingAgain(*cluster, u.job.job_id(), u.step, Clock::now());
  EXPECT_EQ(cluster->TrainerPid(u.job.job_id(), 0), survivor) << "rank 0 kept its process";
  const v1::Job done = Succeeded(*cluster, u.job.job_id());
  ExpectHealed(done, "rank_exit", /*any_worker=*/true);
  ExpectBitwiseHeal(*cluster, u.job.job_id(), Uninterrupted(*cluster, 2, WithoutSnapshots(job)));
}

TEST_F(HealInPlaceTest, WhenTheRankAndItsBuddyAreBothLostTheJobRestartsFromStorageBitwise) {
  std::unique_ptr<LocalCluster> cluster = Start(3);
  std::vector<std::string> job = Healable();
  job.push_back("checkpoint.enable=true");  // the storage checkpoint it falls back to
  const Underway u = SubmitAndRunTo(*cluster, job, /*rank=*/1);
  ASSERT_GT(u.trainer, 0);
  const pid_t rank0 = cluster->TrainerPid(u.job.job_id(), 0);
  ASSERT_GT(rank0, 0);
  kill(u.trainer, SIGKILL);  // rank 1, whose buddy in a world of 2 is rank 0
  kill(rank0, SIGKILL);
  const v1::Job done = Succeeded(*cluster, u.job.job_id());
  ASSERT_GE(done.failures_size(), 1);
  EXPECT_EQ(done.failures(done.failures_size() - 1).recovery(), "restarted");
  EXPECT_EQ(done.restart_count(), 1);
  ExpectBitwiseResume(*cluster, u.job.job_id(), 3,
                      Uninterrupted(*cluster, 2, WithoutSnapshots(job)));
}

}  // namespace
}  // namespace ringtrain::testing
