// Ctrl-C (SIGINT) on `ringctl watch` and `ringctl submit --follow` against a real local cluster:
// by default the job keeps running and ringctl says how to cancel it; with --cancel-on-interrupt
// the job is cancelled (torchrun's behaviour). Both exit 130.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "tests/e2e/local_cluster.h"

namespace ringtrain::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A one-rank job that runs far longer than the test (it is cancelled at the end).
std::vector<std::string> Long() {
  return {"parallelism.data_parallel_replicate_degree=1",
          "parallelism.context_parallel_degree=1",
          "training.steps=100000",
          "training.seq_len=32",
          "training.local_batch_size=2",
          "lr_scheduler.warmup_steps=1",
          "metrics.log_freq=1000"};
}

// Waits until `path` shows a step line (the follower is following), then sends SIGINT to `child`;
// its exit status.
int InterruptWhenFollowing(Subprocess& child, const std::string& path) {
  EXPECT_TRUE(WaitFor([&] { return ReadFile(path).find("  loss ") != std::string::npos; }, 60))
      << ReadFile(path);
  child.Signal(SIGINT);
  return WaitCommand(child, 20);
}

TEST(InterruptTest, CtrlCLeavesTheJobRunningUnlessAskedToCancelIt) {
  LocalCluster cluster(1);
  const std::string config = ConfigPath("debug_model.toml");

  // watch: the job keeps running, and ringctl says how to cancel it.
  const v1::Job job = cluster.Submit(config, Long());
  const std::string watch_out = cluster.dir() / "watch.txt";
  Subprocess watch = StartCommand(
      {BinDir() + "/ringctl", "watch", job.job_id(), "--coordinator", cluster.address()},
      watch_out);
  EXPECT_EQ(InterruptWhenFollowing(watch, watch_out), 130);
  const std::string left = ReadFile(watch_out);
  EXPECT_THAT(left, HasSubstr(job.job_id() + " keeps running on the cluster"));
  EXPECT_THAT(left, HasSubstr("ringctl cancel " + job.job_id()));
  const int64_t step = cluster.Get(job.job_id()).last_step();
  EXPECT_TRUE(cluster.WaitForJob(
      job.job_id(), [&](const v1::Job& j) { return j.last_step() > step + 2; }, 60,
      "steps after the interrupt"));
  EXPECT_EQ(cluster.Get(job.job_id()).state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(cluster.Ringctl({"cancel", job.job_id()}).exit_code, 0);
  ASSERT_TRUE(cluster.WaitForIdleWorkers(1, 60)) << cluster.Logs();

  // submit --follow --cancel-on-interrupt: the job is cancelled.
  std::vector<std::string> argv = {
      BinDir() + "/ringctl",   "submit",        config,           "--follow",
      "--cancel-on-interrupt", "--coordinator", cluster.address()};
  for (const std::string& o : Long()) argv.push_back("--" + o);
  const std::string submit_out = cluster.dir() / "submit.txt";
  Subprocess submit = StartCommand(argv, submit_out);
  EXPECT_EQ(InterruptWhenFollowing(submit, submit_out), 130);
  const std::string cancelled = ReadFile(submit_out);
  EXPECT_THAT(cancelled, HasSubstr("(--cancel-on-interrupt): CANCELLED")) << cancelled;
  EXPECT_THAT(cancelled, Not(HasSubstr("keeps running")));
  const size_t at = cancelled.find("submitted job-");
  ASSERT_NE(at, std::string::npos) << cancelled;
  const std::string id = cancelled.substr(at + 10, 10);  // "job-000002"
  EXPECT_EQ(cluster.Get(id).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_TRUE(cluster.WaitForIdleWorkers(1, 60)) << cluster.Logs();
}

}  // namespace
}  // namespace ringtrain::testing
