// Context parallelism end to end: training parity through `ringctl loss-compare` (CP = N against
// CP = 1, DP × CP against one rank, the same CP run twice bitwise), a rank killed mid-run, and mesh
// config errors. Every run is real: ringtrain-run starting ringtrain-trainer ranks over Gloo.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

// Runs ringctl loss-compare with `args` into `dir`; returns the command result.
CommandResult LossCompare(const TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinDir() + "/ringctl", "loss-compare",
                                   "--baseline-config",   ConfigPath("debug_model.toml"),
                                   "--output-folder",     dir / "out"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

// CP = N against CP = 1 over 20 steps: step 1 within 1e-6, every step within 1e-4.
void ExpectParity(const std::vector<std::string>& args) {
  TempDir dir;
  const auto r = LossCompare(dir, args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Baseline Loss"), std::string::npos) << r.output;
  const std::vector<double> base = ReadLosses(dir / "out/baseline.jsonl");
  const std::vector<double> test = ReadLosses(dir / "out/test.jsonl");
  ASSERT_EQ(base.size(), 20u);
  ASSERT_EQ(test.size(), 20u);
  EXPECT_NEAR(test[0], base[0], 1e-6);
  double max_diff = 0;
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_NEAR(test[i], base[i], 1e-4) << "step " << i + 1;
    max_diff = std::max(max_diff, std::fabs(test[i] - base[i]));
  }
  std::printf("step-1 |diff| %.3e, max |diff| over 20 steps %.3e\n", std::fabs(test[0] - base[0]),
              max_diff);
}

TEST(CpParityTest, Cp2MatchesCp1) {
  ExpectParity({"--test-nproc", "2", "--test-options=--parallelism.context_parallel_degree=2",
                "--steps", "20", "--atol", "1e-4"});
}

TEST(CpParityTest, Cp4MatchesCp1) {
  ExpectParity({"--test-nproc", "4", "--test-options=--parallelism.context_parallel_degree=4",
                "--steps", "20", "--atol", "1e-4"});
}

// Same global batch (8): one rank with 8 sequences against dp 2 × cp 2 with 4 per replica.
TEST(CpParityTest, Dp2Cp2MatchesOneRankWithTheSameGlobalBatch) {
  ExpectParity({"--test-nproc", "4",
                "--test-options=--parallelism.context_parallel_degree=2 "
                "--parallelism.data_parallel_replicate_degree=2 --training.local_batch_size=4",
                "--steps", "20", "--atol", "1e-4"});
}

TEST(CpParityTest, SameCp4ConfigTwiceIsBitwiseEqual) {
  TempDir dir;
  const std::string cp4 = "--parallelism.context_parallel_degree=4";
  const auto r =
      LossCompare(dir, {"--baseline-nproc", "4", "--test-nproc", "4", "--baseline-options=" + cp4,
                        "--test-options=" + cp4, "--steps", "20", "--assert-equal"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS: all 20 steps bitwise equal"), std::string::npos) << r.output;
}

// The two rotate methods sum blocks in the same order, so they agree bitwise.
TEST(CpParityTest, AlltoallAndAllgatherAreBitwiseEqual) {
  TempDir dir;
  const std::string cp =
      "--parallelism.context_parallel_degree=2 --lr_scheduler.warmup_steps=2 "
      "--lr_scheduler.decay_ratio=0 ";
  const auto r = LossCompare(
      dir, {"--baseline-nproc", "2", "--test-nproc", "2",
            "--baseline-options=" + cp + "--parallelism.context_parallel_rotate_method=alltoall",
            "--test-options=" + cp + "--parallelism.context_parallel_rotate_method=allgather",
            "--steps", "6", "--assert-equal", "--seed", "7"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS: all 6 steps bitwise equal"), std::string::npos) << r.output;
}

// The check can fail: a different LR changes the losses from step 2 on.
TEST(CpParityTest, LossCompareFailsOnARealMismatch) {
  TempDir dir;
  const std::string schedule = "--lr_scheduler.warmup_steps=0 --lr_scheduler.decay_ratio=0";
  const auto r = LossCompare(dir, {"--baseline-options=" + schedule,
                                   "--test-options=" + schedule + " --optimizer.lr=0.004",
                                   "--steps", "3", "--assert-equal"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("FAIL: 2 of 3 steps not bitwise equal"), std::string::npos) << r.output;
}

// ---- A rank killed with SIGKILL mid-run ----

std::vector<std::string> LongCpRun(const std::string& jsonl) {
  return {BinDir() + "/ringtrain-trainer", ConfigPath("debug_model.toml"),
          "--training.steps=100000",       "--lr_scheduler.warmup_steps=0",
          "--lr_scheduler.decay_ratio=0",  "--parallelism.context_parallel_degree=2",
          "--comm.timeout_seconds=10",     "--metrics.jsonl=" + jsonl};
}

bool WaitForSteps(const std::string& jsonl, size_t steps, double timeout_seconds) {
  return WaitFor([&] { return ReadJsonl(jsonl).size() >= steps; }, timeout_seconds);
}

TEST(CpFailureTest, SurvivorNamesTheLostPeerWithinTheTimeout) {
  TempDir dir;
  const int port = FreePort();
  std::vector<Subprocess> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(
        StartCommand(LongCpRun(dir / "m.jsonl"), dir / ("rank" + std::to_string(r) + ".log"), "",
                     {"RANK=" + std::to_string(r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                      "MASTER_PORT=" + std::to_string(port), "OMP_NUM_THREADS=1"}));
  }
  ASSERT_TRUE(WaitForSteps(dir / "m.jsonl", 3, 120)) << ReadFile(dir / "rank0.log");
  const auto killed_at = std::chrono::steady_clock::now();
  ranks[1].Signal(SIGKILL);
  EXPECT_EQ(WaitCommand(ranks[1], 10), 128 + SIGKILL);
  const int code = WaitCommand(ranks[0], 10 + 5);  // comm.timeout_seconds plus a few seconds
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  const std::string log = ReadFile(dir / "rank0.log");
  EXPECT_EQ(code, 3) << "the trainer's status for a lost peer (common/trainer_exit.h)\n" << log;
  EXPECT_NE(log.find("lost peer: rank 1"), std::string::npos) << log;
  std::printf("rank 0 exited %.1f s after rank 1 was killed\n", seconds);
}

TEST(CpFailureTest, LauncherExitsNonZeroWhenARankIsKilled) {
  TempDir dir;
  std::vector<std::string> argv = {BinDir() + "/ringtrain-run", "--nproc", "2"};
  const auto run = LongCpRun(dir / "m.jsonl");
  argv.insert(argv.end(), run.begin() + 1, run.end());
  Subprocess launcher = StartCommand(argv, dir / "run.log");
  ASSERT_TRUE(WaitForSteps(dir / "m.jsonl", 3, 120)) << ReadFile(dir / "run.log");
  // The launcher's children are the ranks; kill rank 1 (the second child).
  const std::string pid = std::to_string(launcher.pid());
  const std::string children = ReadFile("/proc/" + pid + "/task/" + pid + "/children");
  std::vector<int> pids;
  for (size_t pos = 0; pos < children.size();) {
    const size_t end = children.find(' ', pos);
    pids.push_back(std::stoi(children.substr(pos, end - pos)));
    pos = end == std::string::npos ? children.size() : end + 1;
  }
  ASSERT_EQ(pids.size(), 2u) << children;
  kill(pids[1], SIGKILL);  // a rank: the launcher's child, not one of ours
  const int code = WaitCommand(launcher, 10 + 10);
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1) << "ringtrain-run hung";
  EXPECT_NE(ReadFile(dir / "run.log").find("rank 1"), std::string::npos)
      << ReadFile(dir / "run.log");
  for (int pid : pids) EXPECT_NE(kill(pid, 0), 0) << "rank process " << pid << " left running";
}

// ---- Mesh config errors: rejected before any rank starts work ----

struct MeshError {
  std::string name;
  int world;
  std::vector<std::string> overrides;
  std::string expected;
};

class MeshConfigErrorTest : public ::testing::TestWithParam<MeshError> {};

TEST_P(MeshConfigErrorTest, RejectedWithAClearMessage) {
  const MeshError& e = GetParam();
  std::vector<std::string> argv = {BinDir() + "/ringtrain-trainer", ConfigPath("debug_model.toml"),
                                   "--rank=0", "--world-size=" + std::to_string(e.world),
                                   "--master-port=1"};
  argv.insert(argv.end(), e.overrides.begin(), e.overrides.end());
  const auto r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(e.expected), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MeshConfigErrorTest,
    ::testing::Values(MeshError{"seq_len_not_divisible",
                                3,
                                {"--parallelism.context_parallel_degree=3"},
                                "try training.seq_len = 252 or 258"},
                      MeshError{"world_not_dp_times_cp",
                                3,
                                {"--parallelism.context_parallel_degree=2",
                                 "--parallelism.data_parallel_replicate_degree=2"},
                                "but the world size is 3"},
                      MeshError{"unknown_rotate_method",
                                2,
                                {"--parallelism.context_parallel_degree=2",
                                 "--parallelism.context_parallel_rotate_method=ring"},
                                "parallelism.context_parallel_rotate_method"},
                      MeshError{"unknown_load_balancer",
                                2,
                                {"--parallelism.context_parallel_degree=2",
                                 "--parallelism.context_parallel_load_balancer=zigzag"},
                                "parallelism.context_parallel_load_balancer"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ringtrain::testing
