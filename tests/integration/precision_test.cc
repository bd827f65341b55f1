// Mixed precision, the fused attention kernel and the collectives' backend choice, end to end on
// the CPU with the real binaries: bf16 compute trains like float32 (close, not equal), twice
// bitwise, resumed bitwise, and with CP = 2 like CP = 1; bf16 gradient reduction (dp 2) rounds,
// halves the bytes sent and stays as close to float32; the fused kernel (PyTorch's CPU flash, the
// code path CUDA ranks take) matches the tiled kernel, locally and in the ring; a backend the rank
// cannot use is refused up front with a message naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;

// The debug config made smaller (bf16 matmuls are slow on a CPU), constant LR after 2 steps.
std::vector<std::string> Small(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {ConfigPath("debug_model.toml"),  "--lr_scheduler.warmup_steps=2",
                                   "--lr_scheduler.decay_ratio=0",  "--training.seq_len=128",
                                   "--training.local_batch_size=4", "--model.n_layers=2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::vector<std::string> Trainer(const std::vector<std::string>& extra) {
  return TrainerCommand(Small(extra));
}

std::vector<std::string> Launch(int nproc, const std::vector<std::string>& extra) {
  return LauncherCommand(nproc, Small(extra));
}

const std::string kBf16 = "--training.mixed_precision_param=bfloat16";
const std::string kBf16Reduce = "--training.mixed_precision_reduce=bfloat16";

// Every rank's bytes_sent in each step record's `ranks` array, in record order.
std::vector<int64_t> BytesSent(const std::string& path) {
  std::vector<int64_t> bytes;
  const std::string key = "\"bytes_sent\":";
  for (const auto& r : ReadJsonl(path)) {
    const std::string& ranks = r.at("ranks");
    for (size_t at = ranks.find(key); at != std::string::npos; at = ranks.find(key, at + 1)) {
      bytes.push_back(std::stoll(ranks.substr(at + key.size())));
    }
  }
  return bytes;
}

// The bound on |bf16 loss − float32 loss| at any of kPrecisionSteps steps, from bf16's 8-bit
// significand: one rounding is off by at most u = 2^-9 ≈ 2.0e-3 relative, so a loss of 5–6.8 (these
// runs' range over their first steps) rounded once to bf16 would be off by up to 6.8 · u ≈ 1.3e-2.
// The losses here are float32 sums over 512 tokens of bf16-rounded activations, whose independent
// rounding errors largely cancel, and the weights stay float32, so the gap stays well below one
// such rounding of the loss: measured over 50 steps (CPU), 1.8e-3 for bf16 compute (one rank) and
// 1.7e-3 for bf16 compute with bf16 reduction (dp 2), about u in absolute terms. 1e-2, about
// 5 times that and below the one-rounding figure, leaves room for other BLAS builds and fails when
// an error of the size of a bf16-rounded loss (or larger) appears.
constexpr int kPrecisionSteps = 50;
constexpr double kBf16LossBound = 1e-2;
const std::string kPrecisionStepsFlag = "--training.steps=" + std::to_string(kPrecisionSteps);

TEST(PrecisionTest, Bfloat16TrainsCloseToFloat32AndRepeatsBitwise) {
  TempDir dir;
  const auto f32 = RunCommand(Trainer({kPrecisionStepsFlag, "--metrics.jsonl=" + (dir / "f32")}));
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  // The repeat runs the first 8 steps (the LR is constant after 2 steps, so those are the same).
  for (const std::string name : {"bf16a", "bf16b"}) {
    const std::string steps = name == "bf16a" ? kPrecisionStepsFlag : "--training.steps=8";
    const auto r = RunCommand(Trainer({steps, kBf16, "--metrics.jsonl=" + (dir / name)}));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("mixed precision: bfloat16 compute, float32 master weights"),
              std::string::npos)
        << r.output;
  }
  const auto a = ReadLosses(dir / "f32"), b = ReadLosses(dir / "bf16a"),
             c = ReadLosses(dir / "bf16b");
  ASSERT_EQ(a.size(), size_t(kPrecisionSteps));
  const double gap = MaxDiff(a, b);
  std::printf("bf16 vs float32, max |loss diff| over %d steps: %.3e\n", kPrecisionSteps, gap);
  EXPECT_GT(gap, 0.0) << "bf16 gave float32's losses exactly: it did not compute in bf16";
  EXPECT_LT(gap, kBf16LossBound);
  ASSERT_EQ(c.size(), 8u);
  EXPECT_EQ(std::vector<double>(b.begin(), b.begin() + 8), c)
      << "the same bf16 run twice must match bitwise";
}

// dp 2 (the reduction only runs with more than one rank): bf16 compute with bf16 reduction against
// float32, within the same bound; against bf16 compute alone it differs (the reduce rounded) and
// sends half the gradient bytes.
TEST(PrecisionTest, Bfloat16ReduceStaysCloseToFloat32AndHalvesTheBytes) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"f32", {}}, {"bf16", {kBf16}}, {"bf16_reduce", {kBf16, kBf16Reduce}}};
  for (const auto& [name, flags] : runs) {
    std::vector<std::string> extra = {kPrecisionStepsFlag, "--metrics.jsonl=" + (dir / name)};
    extra.insert(extra.end(), flags.begin(), flags.end());
    const auto r = RunCommand(Launch(2, extra));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("gradients reduced in bfloat16") != std::string::npos,
              name == "bf16_reduce")
        << r.output;
  }
  const auto f32 = ReadLosses(dir / "f32"), bf16 = ReadLosses(dir / "bf16"),
             reduce = ReadLosses(dir / "bf16_reduce");
  ASSERT_EQ(f32.size(), size_t(kPrecisionSteps));
  const double gap = MaxDiff(f32, reduce);
  std::printf(
      "bf16 compute + bf16 reduce vs float32 (dp 2), max |loss diff| over %d steps: %.3e; "
      "vs bf16 compute alone: %.3e\n",
      kPrecisionSteps, gap, MaxDiff(bf16, reduce));
  EXPECT_LT(gap, kBf16LossBound);
  EXPECT_GT(MaxDiff(bf16, reduce), 0.0) << "bf16 reduce gave float32 reduce's losses exactly";
  const auto bytes32 = BytesSent(dir / "bf16"), bytes16 = BytesSent(dir / "bf16_reduce");
  ASSERT_EQ(bytes32.size(), size_t(2 * kPrecisionSteps));
  ASSERT_EQ(bytes16.size(), bytes32.size());
  for (size_t i = 0; i < bytes32.size(); ++i) {
    EXPECT_GT(bytes16[i], 0);
    EXPECT_EQ(2 * bytes16[i], bytes32[i]) << "record " << i / 2 << " rank " << i % 2;
  }
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
  const auto a = ReadLosses(dir / "full.jsonl"), b = ReadLosses(dir / "r.jsonl");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(std::vector<double>(a.begin() + 3, a.end()), b);
}

TEST(PrecisionTest, Bfloat16Cp2MatchesCp1) {
  TempDir dir;
  const auto one =
      RunCommand(Trainer({"--training.steps=6", kBf16, "--metrics.jsonl=" + (dir / "1")}));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto two =
      RunCommand(Launch(2, {"--training.steps=6", kBf16, "--parallelism.context_parallel_degree=2",
                            "--metrics.jsonl=" + (dir / "2")}));
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const double gap = MaxDiff(ReadLosses(dir / "1"), ReadLosses(dir / "2"));
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
  const auto fused =
      RunCommand(Trainer({"--training.steps=5", "--training.attention_kernel=torch_flash",
                          "--metrics.jsonl=" + (dir / "fused")}));
  ASSERT_EQ(fused.exit_code, 0) << fused.output;
  EXPECT_NE(fused.output.find("attention: local, fused"), std::string::npos) << fused.output;
  const auto ring = RunCommand(
      Launch(2, {"--training.steps=5", "--training.attention_kernel=torch_flash",
                 "--parallelism.context_parallel_degree=2", "--metrics.jsonl=" + (dir / "ring")}));
  ASSERT_EQ(ring.exit_code, 0) << ring.output;
  EXPECT_NE(ring.output.find("attention: ring over cp 2, blocks fused"), std::string::npos)
      << ring.output;
  const auto t = ReadLosses(dir / "tiled");
  ASSERT_EQ(t.size(), 5u);
  EXPECT_LT(MaxDiff(t, ReadLosses(dir / "fused")), 1e-5);
  EXPECT_LT(MaxDiff(t, ReadLosses(dir / "ring")), 1e-5);
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
