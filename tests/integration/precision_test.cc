// Mixed precision, the fused attention kernel and the collectives' backend choice, end to end on
// the CPU with the real binaries: bf16 compute trains like float32 (close, not equal), twice
// bitwise, resumed bitwise, and with CP = 2 like CP = 1; the fused kernel (PyTorch's CPU flash, the
// code path CUDA ranks take) matches the tiled kernel, locally and in the ring; a backend the rank
// cannot use is refused up front with a message naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;

// The debug config made smaller (bf16 matmuls are slow on a CPU), constant LR after 2 steps.
std::vector<std::string> Small(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {ConfigPath("debug_model.toml"),
                                   "--lr_scheduler.warmup_steps=2",
                                   "--lr_scheduler.decay_ratio=0",
                                   "--training.seq_len=128",
                                   "--training.local_batch_size=4",
                                   "--model.n_layers=2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::vector<std::string> Trainer(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {BinDir() + "/ringtrain-trainer"};
  for (const auto& a : Small(extra)) argv.push_back(a);
  return argv;
}

std::vector<std::string> Launch(int nproc, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {BinDir() + "/ringtrain-run", "--nproc", std::to_string(nproc)};
  for (const auto& a : Small(extra)) argv.push_back(a);
  return argv;
}

std::vector<double> Losses(const std::string& path) {
  std::vector<double> losses;
  for (const auto& r : ReadJsonl(path)) losses.push_back(std::stod(r.at("loss")));
  return losses;
}

double MaxDiff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

const std::string kBf16 = "--training.mixed_precision_param=bfloat16";

TEST(PrecisionTest, Bfloat16TrainsCloseToFloat32AndRepeatsBitwise) {
  TempDir dir;
  const auto f32 = RunCommand(Trainer({"--training.steps=8", "--metrics.jsonl=" + (dir / "f32")}));
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  for (const char* name : {"bf16a", "bf16b"}) {
    const auto r = RunCommand(Trainer({"--training.steps=8", kBf16, "--metrics.jsonl=" + (dir / name)}));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("mixed precision: bfloat16 compute, float32 master weights"),
              std::string::npos)
        << r.output;
  }
  const auto a = Losses(dir / "f32"), b = Losses(dir / "bf16a"), c = Losses(dir / "bf16b");
  ASSERT_EQ(a.size(), 8u);
  const double gap = MaxDiff(a, b);
  std::printf("bf16 vs float32, max |loss diff| over 8 steps: %.3e\n", gap);
  EXPECT_GT(gap, 0.0) << "bf16 gave float32's losses exactly: it did not compute in bf16";
  EXPECT_LT(gap, 2e-2);
  EXPECT_EQ(b, c) << "the same bf16 run twice must match bitwise";
}

TEST(PrecisionTest, Bfloat16ResumeIsBitwise) {
  TempDir dir;
  const std::vector<std::string> common = {"--training.steps=6", kBf16, "--checkpoint.enable=true",
                                           "--checkpoint.interval=3"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = common;
    all.insert(all.end(), extra.begin(), extra.end());
    return Trainer(all);
  };
  const auto full = RunCommand(
      with({"--checkpoint.folder=" + (dir / "full"), "--metrics.jsonl=" + (dir / "full.jsonl")}));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  fs::create_directories(dir / "resume");
  fs::copy(dir / "full/step-3", dir / "resume/step-3", fs::copy_options::recursive);
  const auto resumed = RunCommand(
      with({"--checkpoint.folder=" + (dir / "resume"), "--metrics.jsonl=" + (dir / "r.jsonl")}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto a = Losses(dir / "full.jsonl"), b = Losses(dir / "r.jsonl");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(std::vector<double>(a.begin() + 3, a.end()), b);
}

TEST(PrecisionTest, Bfloat16Cp2MatchesCp1) {
  TempDir dir;
  const auto one = RunCommand(Trainer({"--training.steps=6", kBf16, "--metrics.jsonl=" + (dir / "1")}));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two = RunCommand(Launch(2, {"--training.steps=6", kBf16,
                                         "--parallelism.context_parallel_degree=2",
                                         "--metrics.jsonl=" + (dir / "2")}));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const double gap = MaxDiff(Losses(dir / "1"), Losses(dir / "2"));
  std::printf("bf16 cp 2 vs cp 1, max |loss diff| over 6 steps: %.3e\n", gap);
  EXPECT_LT(gap, 5e-3);
}

// The fused kernel's whole path — block plan, per-call merges, GQA expansion, backward from the
// final statistics — in the trainer, locally and in a CP = 2 ring, against the tiled kernel.
TEST(PrecisionTest, FusedKernelMatchesTiledLocallyAndInTheRing) {
  TempDir dir;
  const auto tiled = RunCommand(Trainer({"--training.steps=5", "--training.attention_kernel=tiled",
                                         "--metrics.jsonl=" + (dir / "tiled")}));
  ASSERT_EQ(tiled.exit_code, 0) << tiled.output;
  EXPECT_NE(tiled.output.find("attention: local, tiled"), std::string::npos) << tiled.output;
  const auto fused = RunCommand(Trainer({"--training.steps=5", "--training.attention_kernel=fused",
                                         "--metrics.jsonl=" + (dir / "fused")}));
  ASSERT_EQ(fused.exit_code, 0) << fused.output;
  EXPECT_NE(fused.output.find("attention: local, fused"), std::string::npos) << fused.output;
  const auto ring = RunCommand(Launch(2, {"--training.steps=5", "--training.attention_kernel=fused",
                                          "--parallelism.context_parallel_degree=2",
                                          "--metrics.jsonl=" + (dir / "ring")}));
  ASSERT_EQ(ring.exit_code, 0) << ring.output;
  EXPECT_NE(ring.output.find("attention: ring over cp 2, blocks fused"), std::string::npos)
      << ring.output;
  const auto t = Losses(dir / "tiled");
  ASSERT_EQ(t.size(), 5u);
  EXPECT_LT(MaxDiff(t, Losses(dir / "fused")), 1e-5);
  EXPECT_LT(MaxDiff(t, Losses(dir / "ring")), 1e-5);
}

TEST(PrecisionTest, NcclOnACpuRankIsRefusedNamingTheKey) {
  const auto r = RunCommand(Trainer({"--training.steps=2", "--comm.backend=nccl"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("comm.backend = \"nccl\" needs CUDA ranks"), std::string::npos)
      << r.output;
  const auto bad = RunCommand(Trainer({"--training.steps=2", "--comm.backend=mpi"}));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("comm.backend"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("must be one of \"auto\", \"nccl\", \"gloo\""), std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace ringtrain::testing
