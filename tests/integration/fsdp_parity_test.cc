// FSDP end to end: ringtrain-run starting sharded ringtrain-trainer ranks over Gloo, against the
// replicated run of the same mesh and global batch; the same sharded run twice; sharded
// checkpoints resumed on the same mesh and on another shard degree; a mesh that cannot be sharded.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "common/record/step_record.h"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;

// The debug config, 20 steps by default; a flat LR after 2 warmup steps.
std::vector<std::string> Launch(int nproc, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {ConfigPath("debug_model.toml"), "--training.steps=20",
                                   "--lr_scheduler.warmup_steps=2", "--lr_scheduler.decay_ratio=0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return LauncherCommand(nproc, args);
}

void ExpectWithin(const std::vector<double>& test, const std::vector<double>& base,
                  double tolerance, size_t first_step = 1) {
  ASSERT_EQ(test.size(), base.size());
  double max_diff = 0;
  for (size_t i = 0; i < test.size(); ++i) {
    EXPECT_NEAR(test[i], base[i], tolerance) << "step " << first_step + i;
    max_diff = std::max(max_diff, std::fabs(test[i] - base[i]));
  }
  std::printf("max |loss diff| over %zu steps: %.3e\n", test.size(), max_diff);
}

// Runs `extra` on `nproc` ranks into dir/name (JSONL); returns the launcher's output.
std::string Train(const TempDir& dir, const std::string& name, int nproc,
                  std::vector<std::string> extra) {
  extra.push_back("--metrics.jsonl=" + (dir / name));
  const auto r = RunCommand(Launch(nproc, extra));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

const std::string kShard2Cp2 = "--parallelism.data_parallel_shard_degree=2";
const std::string kCp2 = "--parallelism.context_parallel_degree=2";

TEST(FsdpParityTest, Shard2Cp2MatchesTheReplicatedMeshWithinOneInAMillion) {
  TempDir dir;
  Train(dir, "replicated", 4,
        {kCp2, "--parallelism.data_parallel_replicate_degree=2", "--training.local_batch_size=4"});
  const std::string out = Train(dir, "sharded", 4,
                                {kCp2, kShard2Cp2, "--parallelism.data_parallel_replicate_degree=1",
                                 "--training.local_batch_size=4"});
  EXPECT_NE(out.find("fsdp over 4 ranks (replicas 1)"), std::string::npos) << out;
  const std::vector<double> base = ReadLosses(dir / "replicated");
  const std::vector<double> test = ReadLosses(dir / "sharded");
  ASSERT_EQ(base.size(), 20u);
  ExpectWithin(test, base, 1e-6);
}

TEST(FsdpParityTest, Shard4MatchesTheReplicatedMeshWithinOneInAMillion) {
  TempDir dir;
  Train(dir, "replicated", 4, {"--training.local_batch_size=2"});
  Train(dir, "sharded", 4,
        {"--parallelism.data_parallel_shard_degree=4", "--training.local_batch_size=2"});
  ExpectWithin(ReadLosses(dir / "sharded"), ReadLosses(dir / "replicated"), 1e-6);
}

TEST(FsdpParityTest, ReplicasOfShardsMatchTheReplicatedMesh) {
  TempDir dir;
  Train(dir, "replicated", 4, {"--training.local_batch_size=2"});
  const std::string out =
      Train(dir, "hsdp", 4,
            {"--parallelism.data_parallel_shard_degree=2",
             "--parallelism.data_parallel_replicate_degree=2", "--training.local_batch_size=2"});
  EXPECT_NE(out.find("fsdp over 2 ranks (replicas 2)"), std::string::npos) << out;
  ExpectWithin(ReadLosses(dir / "hsdp"), ReadLosses(dir / "replicated"), 1e-6);
}

// Gradient accumulation with shards: each micro-batch's backward reduce-scatters into the shards'
// gradients; 2 micro-batches of 1 per rank train like one batch of 2.
TEST(FsdpParityTest, ShardedAccumulationMatchesTheShardedBigBatch) {
  TempDir dir;
  const std::string shard4 = "--parallelism.data_parallel_shard_degree=4";
  Train(dir, "big.jsonl", 4, {shard4, "--training.local_batch_size=2", "--training.steps=10"});
  const std::string out = Train(dir, "accumulated.jsonl", 4,
                                {shard4, "--training.local_batch_size=1",
                                 "--training.global_batch_size=8", "--training.steps=10"});
  EXPECT_NE(out.find("gradient accumulation: 2 micro-batches of 1"), std::string::npos) << out;
  ExpectWithin(ReadLosses(dir / "accumulated.jsonl"), ReadLosses(dir / "big.jsonl"), 1e-6);
}

// Each step's bytes sent, summed over the ranks of its record.
std::vector<double> BytesSentPerStep(const std::string& path) {
  std::vector<double> sent;
  std::istringstream lines(ReadFile(path));
  for (std::string line; std::getline(lines, line);) {
    const auto record = ParseStepRecord(line, MissingFigure::kNaN);
    if (!record.ok() || !record->has_value()) continue;
    double total = 0;
    for (const RankFigures& rank : (*record)->ranks) total += rank.bytes_sent;
    sent.push_back(total);
  }
  return sent;
}

// parallelism.fsdp_gradient_sync = "step": the micro-batches' gradients are held unsharded and
// reduce-scattered once per step. Trains like a reduce-scatter per micro-batch (within 1e-6: the
// micro-batches are summed before the ranks instead of after) with fewer bytes sent; the same run
// twice, and a run resumed from its step-4 checkpoint, are bitwise equal.
TEST(FsdpParityTest, ReducingOncePerStepTrainsLikeReducingEveryMicroBatch) {
  TempDir dir;
  const std::vector<std::string> accumulated = {
      "--parallelism.data_parallel_shard_degree=2", kCp2, "--training.local_batch_size=1",
      "--training.global_batch_size=4", "--training.steps=8"};
  auto with = [&](std::vector<std::string> args, std::vector<std::string> more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const std::string once = "--parallelism.fsdp_gradient_sync=step";
  Train(dir, "every.jsonl", 4, accumulated);
  const std::string checkpoints = "--checkpoint.folder=" + (dir / "ckpt");
  const std::string out =
      Train(dir, "once.jsonl", 4,
            with(accumulated, {once, "--checkpoint.enable=true", checkpoints,
                               "--checkpoint.interval=4", "--checkpoint.keep_latest_k=0"}));
  EXPECT_NE(out.find("gradient accumulation: 2 micro-batches of 1; FSDP reduce-scatters once per "
                     "step"),
            std::string::npos)
      << out;
  ExpectWithin(ReadLosses(dir / "once.jsonl"), ReadLosses(dir / "every.jsonl"), 1e-6);
  const std::vector<double> every_sent = BytesSentPerStep(dir / "every.jsonl");
  const std::vector<double> once_sent = BytesSentPerStep(dir / "once.jsonl");
  ASSERT_EQ(once_sent.size(), 8u);
  ASSERT_EQ(every_sent.size(), 8u);
  for (size_t i = 0; i < once_sent.size(); ++i) {
    EXPECT_LT(once_sent[i], every_sent[i]) << "step " << i + 1;
  }

  Train(dir, "again.jsonl", 4, with(accumulated, {once}));
  EXPECT_EQ(ReadJsonlColumn(dir / "again.jsonl", "loss"),
            ReadJsonlColumn(dir / "once.jsonl", "loss"));

  fs::create_directories(dir / "resume");
  fs::copy(dir / "ckpt/step-4", dir / "resume/step-4", fs::copy_options::recursive);
  const std::string resumed =
      Train(dir, "resumed.jsonl", 4,
            with(accumulated,
                 {once, "--checkpoint.enable=true", "--checkpoint.folder=" + (dir / "resume"),
                  "--checkpoint.interval=4", "--checkpoint.keep_latest_k=0"}));
  EXPECT_NE(resumed.find("resumed from"), std::string::npos) << resumed;
  const std::vector<std::string> full = ReadJsonlColumn(dir / "once.jsonl", "loss");
  ASSERT_EQ(full.size(), 8u);
  EXPECT_EQ(ReadJsonlColumn(dir / "resumed.jsonl", "loss"),
            std::vector<std::string>(full.begin() + 4, full.end()));
}

TEST(FsdpParityTest, SameShardedConfigTwiceIsBitwiseEqual) {
  TempDir dir;
  for (const char* name : {"a", "b"}) {
    Train(dir, name, 4,
          {kCp2, kShard2Cp2, "--parallelism.data_parallel_replicate_degree=1",
           "--training.local_batch_size=4", "--training.steps=10"});
  }
  EXPECT_EQ(ReadJsonlColumn(dir / "a", "loss"), ReadJsonlColumn(dir / "b", "loss"));
  EXPECT_EQ(ReadJsonlColumn(dir / "a", "grad_norm"), ReadJsonlColumn(dir / "b", "grad_norm"));
  EXPECT_EQ(ReadJsonlColumn(dir / "a", "loss").size(), 10u);
}

// Activation checkpointing gathers a block's shards again for its recompute: full and selective
// op give the sharded run's losses bitwise, on every reshard policy.
TEST(FsdpParityTest, ActivationCheckpointingWithShardsIsBitwiseTheSame) {
  TempDir dir;
  const std::vector<std::string> mesh = {kCp2, kShard2Cp2,
                                         "--parallelism.data_parallel_replicate_degree=1",
                                         "--training.local_batch_size=4", "--training.steps=6"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = mesh;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  Train(dir, "none.jsonl", 4, mesh);
  Train(dir, "full.jsonl", 4, with({"--activation_checkpoint.mode=full"}));
  Train(dir, "op.jsonl", 4,
        with({"--activation_checkpoint.mode=selective",
              "--parallelism.fsdp_reshard_after_forward=always"}));
  Train(dir, "never.jsonl", 4,
        with({"--activation_checkpoint.mode=selective",
              "--activation_checkpoint.selective_ac_option=2",
              "--parallelism.fsdp_reshard_after_forward=never"}));
  const std::vector<std::string> none = ReadJsonlColumn(dir / "none.jsonl", "loss");
  ASSERT_EQ(none.size(), 6u);
  for (const char* name : {"full.jsonl", "op.jsonl", "never.jsonl"}) {
    EXPECT_EQ(ReadJsonlColumn(dir / name, "loss"), none) << name;
    EXPECT_EQ(ReadJsonlColumn(dir / name, "grad_norm"),
              ReadJsonlColumn(dir / "none.jsonl", "grad_norm"))
        << name;
  }
}

// bf16 compute from float32 master shards: the gathers carry bf16 weights, the replicated run casts
// the same float32 weights, so the forward is the same and only the gradient sums' order differs;
// bf16 rounding of activations amplifies that a little. bf16 reduction rounds the gradients too.
TEST(FsdpParityTest, Bfloat16ShardsTrainLikeBfloat16Replicas) {
  TempDir dir;
  const std::string bf16 = "--training.mixed_precision_param=bfloat16";
  Train(dir, "replicated.jsonl", 4, {bf16, "--training.local_batch_size=2", "--training.steps=6"});
  const std::string out = Train(dir, "sharded.jsonl", 4,
                                {bf16, "--parallelism.data_parallel_shard_degree=4",
                                 "--training.local_batch_size=2", "--training.steps=6"});
  EXPECT_NE(out.find("gathers in bfloat16, reduces in float32"), std::string::npos) << out;
  Train(dir, "bf16_reduce.jsonl", 4,
        {bf16, "--training.mixed_precision_reduce=bfloat16",
         "--parallelism.data_parallel_shard_degree=4", "--training.local_batch_size=2",
         "--training.steps=6"});
  const std::vector<double> base = ReadLosses(dir / "replicated.jsonl");
  ASSERT_EQ(base.size(), 6u);
  // Step 1 runs the same forward: bitwise.
  EXPECT_EQ(ReadLosses(dir / "sharded.jsonl").at(0), base.at(0));
  ExpectWithin(ReadLosses(dir / "sharded.jsonl"), base, 1e-3);
  // Measured: 1.6e-4 and 2.1e-4 over 10 steps (loss ≈ 6, bf16's relative step 2^-8); bounds ~6×
  // and ~10× that.
  ExpectWithin(ReadLosses(dir / "bf16_reduce.jsonl"), base, 2e-3);
}

// A sharded run checkpointed at step 6 (shard 2 × cp 2: four parts, an index, COMPLETE) and
// resumed: on the same mesh the remaining steps repeat bitwise; on shard 4 × cp 1, replicate 2 ×
// shard 2 and one replicated rank (the same global batch of 8) within 1e-6 — each rank reading
// only its slices of the parts. ringtrain-convert to-pt makes it a full state dict torch.load
// reads.
TEST(FsdpParityTest, ShardedCheckpointResumesOnTheSameMeshAndOnOtherMeshes) {
  TempDir dir;
  const std::vector<std::string> mesh = {kCp2, kShard2Cp2,
                                         "--parallelism.data_parallel_replicate_degree=1",
                                         "--training.local_batch_size=4", "--training.steps=12"};
  auto with_checkpoints = [&](std::vector<std::string> args, const std::string& folder) {
    for (const std::string& a :
         {std::string("--checkpoint.enable=true"), "--checkpoint.folder=" + (dir / folder),
          std::string("--checkpoint.interval=6"), std::string("--checkpoint.keep_latest_k=0")}) {
      args.push_back(a);
    }
    return args;
  };
  Train(dir, "full.jsonl", 4, with_checkpoints(mesh, "ckpt"));
  for (const char* part :
       {"rank-00000.safetensors", "rank-00003.safetensors", "index.json", "COMPLETE"}) {
    ASSERT_TRUE(fs::exists(fs::path(dir / "ckpt/step-6") / part)) << part;
  }
  auto resume_in = [&](const std::string& folder) {
    fs::create_directories(dir / folder);
    fs::copy(dir / "ckpt/step-6", (dir / folder) + "/step-6", fs::copy_options::recursive);
    return folder;
  };
  const std::string same = Train(dir, "same.jsonl", 4, with_checkpoints(mesh, resume_in("same")));
  EXPECT_NE(same.find("resumed from"), std::string::npos) << same;
  const std::vector<std::string> full_losses = ReadJsonlColumn(dir / "full.jsonl", "loss");
  ASSERT_EQ(full_losses.size(), 12u);
  const std::vector<std::string> tail(full_losses.begin() + 6, full_losses.end());
  EXPECT_EQ(ReadJsonlColumn(dir / "same.jsonl", "loss"), tail);

  std::vector<double> tail_values;
  for (const std::string& v : tail) tail_values.push_back(std::stod(v));
  const struct {
    const char* name;
    int nproc;
    std::vector<std::string> mesh;
  } others[] = {
      {"shard4",
       4,
       {"--parallelism.data_parallel_shard_degree=4", "--training.local_batch_size=2"}},
      {"replicate2_shard2",
       4,
       {"--parallelism.data_parallel_shard_degree=2",
        "--parallelism.data_parallel_replicate_degree=2", "--training.local_batch_size=2"}},
      {"one_rank", 1, {"--training.local_batch_size=8"}},
  };
  for (const auto& other : others) {
    SCOPED_TRACE(other.name);
    std::vector<std::string> args = other.mesh;
    args.push_back("--training.steps=12");
    const std::string jsonl = std::string(other.name) + ".jsonl";
    const std::string out =
        Train(dir, jsonl, other.nproc, with_checkpoints(args, resume_in(other.name)));
    EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
    ExpectWithin(ReadLosses(dir / jsonl), tail_values, 1e-6, 7);
  }

  const auto converted =
      RunCommand({BinDir() + "/ringtrain-convert", "to-pt", dir / "ckpt/step-6", dir / "model.pt"});
  ASSERT_EQ(converted.exit_code, 0) << converted.output;
  const auto check = RunCommand({PythonPath(), "-c",
                                 "import sys, torch; sd = torch.load(sys.argv[1]); "
                                 "print(len(sd), tuple(sd['layers.0.attention.wq.weight'].shape), "
                                 "tuple(sd['tok_embeddings.weight'].shape))",
                                 dir / "model.pt"});
  ASSERT_EQ(check.exit_code, 0) << check.output;
  // 4 layers × 9 tensors + embedding + norm + output; the debug model's real shapes.
  EXPECT_NE(check.output.find("39 (128, 128) (512, 128)"), std::string::npos) << check.output;
}

TEST(FsdpParityTest, AShardDegreeThatDoesNotDivideTheWorldIsNamed) {
  const auto r = RunCommand(Launch(4, {"--parallelism.data_parallel_shard_degree=3"}));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(
      r.output.find(
          "data_parallel_replicate_degree = -1 cannot fill the world size 4: it is not divisible "
          "by data_parallel_shard_degree (3)"),
      std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ringtrain::testing
