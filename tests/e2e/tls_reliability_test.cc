// Reliability as deployed beyond loopback — TLS, client tokens and join tokens — on a real local
// cluster: a coordinator stopped (SIGTERM) and started again under running agents gets them back
// within their heartbeat timeout and re-adopts the job (the SIGKILL case is reliability_test.cc's,
// in both protections); agents started before their coordinator join it; and step records an
// agent could not deliver before it was restarted still reach the store before the job is
// SUCCEEDED, read back from the work dir they were written to.
#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reliability_util.h"

namespace ringtrain::testing {
namespace {

using ::testing::HasSubstr;

constexpr Protection kTls = Protection::kTlsAndTokens;

// Lines of rank 0's step records on whichever agent ran it (0 while none has).
int RankZeroRecords(const LocalCluster& cluster, const std::string& job_id, int workers) {
  for (int i = 0; i < workers; ++i) {
    const std::string path = cluster.work_dir(i) + "/" + job_id + "/rank-0/metrics.jsonl";
    if (std::filesystem::exists(path)) return static_cast<int>(ReadJsonl(path).size());
  }
  return 0;
}

TEST_F(ReliabilityTest, ATlsCoordinatorStoppedAndStartedAgainGetsItsAgentsAndJobBack) {
  std::unique_ptr<LocalCluster> cluster = Start(2, {}, {}, kTls);
  const Underway u = SubmitAndRunTo(*cluster, Restartable(1, 2, 0), /*rank=*/0, /*step=*/3);
  const Clock::time_point stopped = Clock::now();
  cluster->RestartCoordinator(SIGTERM);
  const Clock::time_point restarted = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return cluster->Workers().size() == 2; }, 8))
      << "not back within twice the heartbeat timeout\n"
      << cluster->Logs();
  const double back = SecondsSince(restarted);
  const int64_t seen = cluster->Get(u.job.job_id()).last_step();
  ASSERT_TRUE(StepsOnOrEnds(*cluster, u.job.job_id(), seen));
  std::printf(
      "TLS coordinator SIGTERM: stopped in %.2f s; both agents back %.2f s after its "
      "start; step %lld seen then, the job's next step or end %.2f s after the start\n",
      std::chrono::duration<double>(restarted - stopped).count(), back,
      static_cast<long long>(seen), SecondsSince(restarted));
  const v1::Job done = Succeeded(*cluster, u.job.job_id());
  EXPECT_EQ(done.restart_count(), 0) << "the ranks were re-adopted, not restarted";
  const std::vector<std::string> stored = StoredRecords(*cluster, u.job.job_id());
  ASSERT_EQ(stored.size(), static_cast<size_t>(kSteps));
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(RawField(stored[i], "step"), std::to_string(i + 1));
  }
}

TEST_F(ReliabilityTest, TlsAgentsStartedBeforeTheirCoordinatorJoinItAndTrain) {
  // The constructor starts the coordinator only once both agents have failed to reach it.
  std::unique_ptr<LocalCluster> cluster = Start(2, {}, {}, kTls, StartOrder::kAgentsFirst);
  ASSERT_EQ(cluster->IdleWorkers(), 2) << cluster->Logs();
  std::vector<std::string> job = Restartable(1, 2, 0);
  job.push_back("training.steps=3");
  job.push_back("lr_scheduler.warmup_steps=1");
  const v1::Job submitted = cluster->Submit(ConfigPath("debug_model.toml"), job);
  const v1::Job done = Succeeded(*cluster, submitted.job_id());
  EXPECT_EQ(done.last_step(), 3);
}

// The probe's case: the coordinator is away while the trainers finish; their agents, holding
// records they could not deliver, are restarted (their outboxes die with them); the coordinator
// comes back, the job's agents do not return its ranks, and its restarted run resumes from the
// final checkpoint with nothing left to compute. Every step must still reach the store — read
// back from the work dir the trainer wrote it to — bitwise as an uninterrupted run computes it.
TEST_F(ReliabilityTest, StepsAnAgentCouldNotDeliverReachTheStoreAfterTheAgentRestarts) {
  std::unique_ptr<LocalCluster> cluster =
      Start(2, {"--adopt-timeout=3", "--records-timeout=60"}, {}, kTls);
  const std::vector<std::string> job_overrides = Restartable(1, 2, 1);
  const Underway u = SubmitAndRunTo(*cluster, job_overrides, /*rank=*/0, /*step=*/2);
  cluster->StopCoordinator(SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return RankZeroRecords(*cluster, u.job.job_id(), 2) >= kSteps; }, 120))
      << "the trainers did not finish without their coordinator\n"
      << cluster->Logs();
  ASSERT_TRUE(WaitFor([&] { return !IsRunning(u.trainer); }, 30));
  for (int i = 0; i < 2; ++i) cluster->RestartWorker(i, SIGTERM);
  cluster->StartCoordinator();
  const v1::Job done = Succeeded(*cluster, u.job.job_id());
  EXPECT_EQ(done.last_step(), kSteps);
  const std::vector<std::map<std::string, std::string>> expected =
      Uninterrupted(*cluster, 2, job_overrides);
  const std::vector<std::string> stored = StoredRecords(*cluster, u.job.job_id());
  ASSERT_EQ(stored.size(), static_cast<size_t>(kSteps)) << cluster->Logs();
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(RawField(stored[i], "step"), std::to_string(i + 1));
    EXPECT_EQ(RawField(stored[i], "loss"), expected.at(i).at("loss")) << "step " << i + 1;
  }
  // ringctl over TLS with a token says how the job ended.
  std::vector<std::string> get = {BinDir() + "/ringctl", "get", u.job.job_id()};
  for (const std::string& flag : cluster->ringctl_flags()) get.push_back(flag);
  const CommandResult shown = RunCommand(get);
  EXPECT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_THAT(shown.output, HasSubstr("SUCCEEDED"));
}

}  // namespace
}  // namespace ringtrain::testing
