// `ringctl plan` against measured peaks: real runs under ringtrain-run, each rank's
// device_memory_peak_bytes (on the CPU the counting allocator's peak tensor bytes,
// worker/trainer/tensor_memory.h), the largest over ranks and steps ≥ 2 (step 1 has no optimizer
// state and no previous gradients yet), against the plan's total for the same config and world:
// within 15 %. The shapes are the debug model widened and lengthened so tensor memory is
// activations, weights and optimizer state, not bookkeeping, and a step takes a few seconds.
// cp 2 keeps the two ranks replicas (data_parallel_shard_degree = 1); shard 2 is FSDP.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

constexpr double kTolerance = 0.15;

// The debug model at dim 256 (ffn 704), 4 layers, vocab 2048, one sequence of 2048 tokens.
std::vector<std::string> WideShape() {
  return {"--model.dim=256", "--model.vocab_size=2048", "--training.seq_len=2048",
          "--training.local_batch_size=1", "--validation.local_batch_size=1"};
}

// The largest device_memory_peak_bytes over every rank of every step ≥ 2.
int64_t MeasuredPeak(const std::string& jsonl) {
  int64_t peak = 0;
  for (const auto& record : ReadJsonl(jsonl)) {
    if (std::stoll(record.at("step")) < 2) continue;
    for (const auto& rank : nlohmann::json::parse(record.at("ranks"))) {
      peak = std::max(peak, rank.at("device_memory_peak_bytes").get<int64_t>());
    }
  }
  return peak;
}

// Runs the shape on `nproc` ranks for three steps and plans it; expects the two within 15 %.
void ExpectPlanNearMeasured(const std::string& name, int nproc,
                            const std::vector<std::string>& extra) {
  TempDir dir;
  std::vector<std::string> overrides = WideShape();
  overrides.insert(overrides.end(), extra.begin(), extra.end());

  std::vector<std::string> run = {BinDir() + "/ringtrain-run", "--nproc", std::to_string(nproc),
                                  ConfigPath("debug_model.toml")};
  run.insert(run.end(), overrides.begin(), overrides.end());
  run.insert(run.end(), {"--training.steps=3", "--lr_scheduler.warmup_steps=0",
                         "--lr_scheduler.decay_ratio=0", "--metrics.jsonl=" + dir / "m.jsonl"});
  const CommandResult trained = RunCommand(run);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const int64_t measured = MeasuredPeak(dir / "m.jsonl");
  ASSERT_GT(measured, 0) << "no device_memory_peak_bytes in " << ReadFile(dir / "m.jsonl");

  std::vector<std::string> plan_argv = {BinDir() + "/ringctl",
                                        "plan",
                                        ConfigPath("debug_model.toml"),
                                        "--world",
                                        std::to_string(nproc),
                                        "--output",
                                        "json",
                                        "--device",
                                        "cpu"};
  plan_argv.insert(plan_argv.end(), overrides.begin(), overrides.end());
  const CommandResult planned = RunCommand(plan_argv);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const nlohmann::json plan = nlohmann::json::parse(planned.output);
  const int64_t total = plan.at("bytes").at("total").get<int64_t>();

  const double error = double(total - measured) / double(measured);
  std::printf("%s: measured %.1f MiB, planned %.1f MiB (%+.1f %%; peak in %s)\n", name.c_str(),
              double(measured) / (1 << 20), double(total) / (1 << 20), 100 * error,
              plan.at("peak_phase").get<std::string>().c_str());
  EXPECT_LE(std::fabs(error), kTolerance) << plan.dump(2);
}

TEST(MemoryPlanTest, Cp1NoCheckpointing) { ExpectPlanNearMeasured("cp 1, AC none", 1, {}); }

TEST(MemoryPlanTest, Cp2RingAttention) {
  ExpectPlanNearMeasured("cp 2, AC none", 2, {"--parallelism.context_parallel_degree=2"});
}

// Ulysses at cp 2: the all-to-alls' buffers instead of the ring's.
TEST(MemoryPlanTest, Cp2Ulysses) {
  ExpectPlanNearMeasured(
      "cp 2 ulysses, AC none", 2,
      {"--parallelism.context_parallel_degree=2", "--parallelism.context_parallel_method=ulysses"});
}

// torchtitan's layout: shard degree -1 with cp 2 shards the weights over the cp ranks.
TEST(MemoryPlanTest, Cp2ShardedOverCp) {
  ExpectPlanNearMeasured(
      "cp 2, FSDP over cp", 2,
      {"--parallelism.context_parallel_degree=2", "--parallelism.data_parallel_shard_degree=-1",
       "--parallelism.data_parallel_replicate_degree=1"});
}

TEST(MemoryPlanTest, Cp1FullCheckpointing) {
  ExpectPlanNearMeasured("cp 1, AC full", 1, {"--activation_checkpoint.mode=full"});
}

// Weights and AdamW state dominate (dim 512, 512 tokens): two replicas all-reduce gradients, or
// two FSDP ranks hold half of them each.
TEST(MemoryPlanTest, Dp2WeightsDominate) {
  ExpectPlanNearMeasured("dp 2, dim 512, seq 512", 2,
                         {"--model.dim=512", "--training.seq_len=512"});
}

TEST(MemoryPlanTest, Fsdp2WeightsDominate) {
  ExpectPlanNearMeasured(
      "fsdp 2, dim 512, seq 512", 2,
      {"--model.dim=512", "--training.seq_len=512", "--parallelism.data_parallel_shard_degree=2"});
}

CommandResult Plan(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinDir() + "/ringctl", "plan", ConfigPath("debug_model.toml")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

TEST(MemoryPlanCommandTest, ErrorsNameWhatWasWrong) {
  const CommandResult size = Plan({"--device-memory", "80XB"});
  EXPECT_EQ(size.exit_code, 2);
  EXPECT_NE(size.output.find("--device-memory '80XB' is not a size"), std::string::npos)
      << size.output;
  const CommandResult config = Plan({"--training.seq_len=-3"});
  EXPECT_EQ(config.exit_code, 2);
  EXPECT_NE(config.output.find("training.seq_len = -3"), std::string::npos) << config.output;
  const CommandResult mesh = Plan({"--world", "3", "--parallelism.context_parallel_degree=2"});
  EXPECT_EQ(mesh.exit_code, 2);
  EXPECT_NE(mesh.output.find("invalid mesh for world size 3"), std::string::npos) << mesh.output;
  const CommandResult world = Plan({"--world", "0"});
  EXPECT_EQ(world.exit_code, 2);
  EXPECT_NE(world.output.find("--world 0"), std::string::npos) << world.output;
}

TEST(MemoryPlanCommandTest, SaysWhetherItFits) {
  const CommandResult fits = Plan({});
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
  EXPECT_NE(fits.output.find("fits 80.0 GiB"), std::string::npos) << fits.output;
  EXPECT_NE(fits.output.find("largest seq_len that fits: "), std::string::npos) << fits.output;
  const CommandResult small = Plan({"--device-memory", "1MiB"});
  EXPECT_EQ(small.exit_code, 1) << small.output;
  EXPECT_NE(small.output.find("does NOT fit 1.0 MiB"), std::string::npos) << small.output;
  EXPECT_NE(small.output.find("no seq_len fits"), std::string::npos) << small.output;
}

// A seq_len above model.max_seq_len (4096 in the debug config) is planned with max_seq_len raised
// to it, and said; a plan that does not fit names the smallest cp and shard degrees that would.
TEST(MemoryPlanCommandTest, RaisesMaxSeqLenAndNamesTheDegreesThatFit) {
  const CommandResult raised = Plan({"--training.seq_len=65536", "--device-memory", "1GiB"});
  EXPECT_NE(raised.output.find("note: training.seq_len 65536 is above the config's "
                               "model.max_seq_len; planned with model.max_seq_len = 65536 (submit "
                               "with --model.max_seq_len=65536)"),
            std::string::npos)
      << raised.output;
  EXPECT_EQ(raised.exit_code, 1) << raised.output;
  EXPECT_NE(raised.output.find("does NOT fit 1.0 GiB"), std::string::npos) << raised.output;
  const size_t at =
      raised.output.find("the smallest that fit: --parallelism.context_parallel_degree=");
  ASSERT_NE(at, std::string::npos) << raised.output;

  // The suggested cp fits, as the plan of that mesh says.
  const CommandResult json =
      Plan({"--training.seq_len=65536", "--device-memory", "1GiB", "--output", "json"});
  const nlohmann::json plan = nlohmann::json::parse(json.output);
  EXPECT_EQ(plan.at("raised_max_seq_len").get<int64_t>(), 65536);
  const int64_t cp = plan.at("smallest_fitting").at("context_parallel_degree").get<int64_t>();
  ASSERT_GT(cp, 1) << json.output;
  const CommandResult with_cp =
      Plan({"--training.seq_len=65536", "--model.max_seq_len=65536", "--device-memory", "1GiB",
            "--world", std::to_string(cp),
            "--parallelism.context_parallel_degree=" + std::to_string(cp)});
  EXPECT_EQ(with_cp.exit_code, 0) << with_cp.output;
  EXPECT_EQ(with_cp.output.find("note:"), std::string::npos)
      << "nothing raised: " << with_cp.output;

  // Nothing could fit 1 MiB.
  const CommandResult none = Plan({"--device-memory", "1MiB"});
  EXPECT_NE(none.output.find("no cp or shard degree up to 4096 fits"), std::string::npos)
      << none.output;
  // Other errors are still errors.
  EXPECT_EQ(Plan({"--training.seq_len=65536", "--model.dim=-1"}).exit_code, 2);
}

// Packed documents: the plan takes block-causal attention with the document balancer (the same
// buffers as causal: the mask is per batch row and position, never a tensor) and refuses it
// without an EOS, naming both keys.
TEST(MemoryPlanCommandTest, AcceptsPackedDocuments) {
  const std::vector<std::string> documents = {
      "--world", "4", "--parallelism.context_parallel_degree=4",
      "--model.attn_mask_type=block_causal",
      "--parallelism.context_parallel_load_balancer=document"};
  std::vector<std::string> with_eos = documents;
  with_eos.push_back("--training.eos_id=0");
  const CommandResult plan = Plan(with_eos);
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("fits 80.0 GiB"), std::string::npos) << plan.output;
  const CommandResult no_eos = Plan(documents);
  EXPECT_EQ(no_eos.exit_code, 2) << no_eos.output;
  EXPECT_NE(no_eos.output.find("training.eos_id"), std::string::npos) << no_eos.output;
  EXPECT_NE(no_eos.output.find("training.tokenizer_path"), std::string::npos) << no_eos.output;
}

// With cp > 1 the plan compares the methods the heads allow (8 heads, 4 K/V heads: ulysses 4
// replicates nothing, every hybrid degree divides), marking the job's own.
TEST(MemoryPlanCommandTest, ComparesTheContextParallelMethods) {
  const std::vector<std::string> cp4 = {"--world", "4", "--parallelism.context_parallel_degree=4",
                                        "--parallelism.context_parallel_method=hybrid",
                                        "--parallelism.context_parallel_ulysses_degree=2"};
  const CommandResult table = Plan(cp4);
  EXPECT_EQ(table.exit_code, 0) << table.output;
  for (const char* row :
       {"CP METHOD", "ring ", "ulysses ", "hybrid 2 × 2 *", "context-parallel attention sends"}) {
    EXPECT_NE(table.output.find(row), std::string::npos) << row << " not in:\n" << table.output;
  }
  std::vector<std::string> json_args = cp4;
  json_args.insert(json_args.end(), {"--output", "json"});
  const CommandResult json = Plan(json_args);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json plan = nlohmann::json::parse(json.output);
  EXPECT_EQ(plan.at("ulysses_degree").get<int64_t>(), 2);
  EXPECT_GT(plan.at("bytes").at("ulysses_buffers").get<int64_t>(), 0);
  ASSERT_EQ(plan.at("methods").size(), 3u);  // ring, ulysses, hybrid 2 × 2
  for (const auto& m : plan.at("methods")) EXPECT_GT(m.at("attention_bytes_per_step"), 0);
  // A degree the heads cannot take is refused, naming both numbers.
  const CommandResult refused =
      Plan({"--world", "3", "--parallelism.context_parallel_degree=3",
            "--parallelism.context_parallel_method=ulysses", "--training.seq_len=1536"});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("model.n_heads = 8 is not divisible by "
                                "parallelism.context_parallel_ulysses_degree = 3"),
            std::string::npos)
      << refused.output;
}

}  // namespace
}  // namespace ringtrain::testing
