// Gradient accumulation end to end on the CPU with the real binaries: A micro-batches of B train
// like one batch of A·B (every step's loss within 1e-6, on one rank and with dp 2), the same
// accumulated run twice is bitwise equal, and a run resumed from a mid-run checkpoint continues
// bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 20;
constexpr int kSeqLen = 128;

// The debug config made smaller (seconds per run), constant LR after 2 steps.
std::vector<std::string> Small(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {ConfigPath("debug_model.toml"), "--lr_scheduler.warmup_steps=2",
                                   "--lr_scheduler.decay_ratio=0",
                                   "--training.seq_len=" + std::to_string(kSeqLen),
                                   "--model.n_layers=2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::vector<std::string> Trainer(const std::vector<std::string>& extra) {
  return TrainerCommand(Small(extra));
}

std::vector<std::string> Launch(int nproc, const std::vector<std::string>& extra) {
  return LauncherCommand(nproc, Small(extra));
}

// Every step within `tol` of the baseline; prints the largest gap.
void ExpectClose(const std::vector<double>& base, const std::vector<double>& test, double tol,
                 const std::string& what) {
  ASSERT_EQ(base.size(), size_t(kSteps)) << what;
  ASSERT_EQ(test.size(), size_t(kSteps)) << what;
  double max_diff = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    EXPECT_NEAR(test[i], base[i], tol) << what << ", step " << i + 1;
    max_diff = std::max(max_diff, std::fabs(test[i] - base[i]));
  }
  std::printf("%s: max |loss diff| over %d steps %.3e\n", what.c_str(), kSteps, max_diff);
}

const std::string kSteps20 = "--training.steps=" + std::to_string(kSteps);

// Global batch 8 three ways: one batch of 8; 4 micro-batches of 2 on one rank; dp 2 × 2
// micro-batches of 2. The data order is the same (sampler.h), so only the order of floating-point
// sums differs: 1e-6 holds over 20 steps. A wrong divisor (per micro-batch instead of per step) or
// a wrong data order moves step 1 by far more.
TEST(AccumulationTest, MicroBatchesTrainLikeOneBatchOnOneRankAndWithDp2) {
  TempDir dir;
  const auto one = RunCommand(
      Trainer({kSteps20, "--training.local_batch_size=8", "--metrics.jsonl=" + (dir / "one")}));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(one.output.find("gradient accumulation"), std::string::npos) << one.output;
  for (const char* name : {"accum_a", "accum_b"}) {
    const auto r =
        RunCommand(Trainer({kSteps20, "--training.local_batch_size=2",
                            "--training.global_batch_size=8", "--metrics.jsonl=" + (dir / name)}));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("gradient accumulation: 4 micro-batches of 2"), std::string::npos)
        << r.output;
  }
  const auto dp2 =
      RunCommand(Launch(2, {kSteps20, "--training.local_batch_size=2",
                            "--training.global_batch_size=8", "--metrics.jsonl=" + (dir / "dp2")}));
  ASSERT_EQ(dp2.exit_code, 0) << dp2.output;
  EXPECT_NE(dp2.output.find("gradient accumulation: 2 micro-batches of 2"), std::string::npos)
      << dp2.output;

  const auto base = ReadLosses(dir / "one");
  ExpectClose(base, ReadLosses(dir / "accum_a"), 1e-6, "A 4 x B 2 vs B 8");
  ExpectClose(base, ReadLosses(dir / "dp2"), 1e-6, "dp 2 x A 2 x B 2 vs B 8");
  EXPECT_EQ(ReadLosses(dir / "accum_a"), ReadLosses(dir / "accum_b"))
      << "the same accumulated run twice must match bitwise";
  // Every record counts the whole step's tokens: G × L.
  for (const char* name : {"one", "accum_a", "dp2"}) {
    for (const auto& r : ReadJsonl(dir / name)) {
      EXPECT_EQ(r.at("tokens"), std::to_string(8 * kSeqLen)) << name;
    }
  }
}

// Checkpointed at step 6 of 12 with A = 4: the resumed run continues at global sample 6 × 8 and
// reproduces steps 7 … 12 bitwise.
TEST(AccumulationTest, ResumeWithAccumulationIsBitwise) {
  TempDir dir;
  const std::vector<std::string> common = {
      "--training.steps=12",      "--training.local_batch_size=2", "--training.global_batch_size=8",
      "--checkpoint.enable=true", "--checkpoint.interval=6",       "--checkpoint.keep_latest_k=0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = common;
    all.insert(all.end(), extra.begin(), extra.end());
    return Trainer(all);
  };
  const auto full = RunCommand(
      with({"--checkpoint.folder=" + (dir / "full"), "--metrics.jsonl=" + (dir / "full.jsonl")}));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::string state = ReadFile(dir / "full/step-6/train_state.json");
  EXPECT_NE(state.find("\"global_sample\": 48"), std::string::npos) << state;
  fs::create_directories(dir / "resume");
  fs::copy(dir / "full/step-6", dir / "resume/step-6", fs::copy_options::recursive);
  const auto resumed = RunCommand(
      with({"--checkpoint.folder=" + (dir / "resume"), "--metrics.jsonl=" + (dir / "r.jsonl")}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  const auto a = ReadJsonl(dir / "full.jsonl"), b = ReadJsonl(dir / "r.jsonl");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(b[i].at("step"), a[6 + i].at("step"));
    EXPECT_EQ(b[i].at("loss"), a[6 + i].at("loss")) << "step " << 7 + i;
    EXPECT_EQ(b[i].at("grad_norm"), a[6 + i].at("grad_norm")) << "step " << 7 + i;
  }
}

}  // namespace
}  // namespace ringtrain::testing
