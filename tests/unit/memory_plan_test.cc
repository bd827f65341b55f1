// Tests for the memory plan's arithmetic: parameter counts against the published Llama 3 8B count,
// and how each component scales with the FSDP group, the activation-checkpoint mode, the dtype and
// the context-parallel degree. (How close the plan comes to measured peaks is
// tests/integration/memory_plan_test.cc.)
#include "common/plan/memory_plan.h"

#include <string>
#include <vector>

#include "common/plan/loss_chunks.h"
#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

JobConfig Load(const std::string& name, const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<JobConfig> config = LoadJobConfig(testing::ConfigPath(name), overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : JobConfig{};
}

// The plan of `config` on `world` ranks, through the mesh the service would resolve.
MemoryPlan Plan(const JobConfig& config, int64_t world) {
  const absl::StatusOr<MeshDegrees> mesh = ResolveMesh(config, world);
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return PlanMemory(config, mesh.ok() ? *mesh : MeshDegrees{});
}

constexpr int64_t kLlama3_8bParameters = 8'030'261'248;  // meta-llama/Meta-Llama-3-8B

TEST(MemoryPlanTest, ParameterCountIsLlama3_8b) {
  EXPECT_EQ(PlannedParameterCount(Load("llama3_8b.toml").model), kLlama3_8bParameters);
}

TEST(MemoryPlanTest, DebugModelParameterCount) {
  // dim 128, 4 layers, 8 heads (4 kv), vocab 512, ffn 384: embedding and output 2·512·128, per
  // block wq/wo 2·128·128 + wk/wv 2·64·128 + FFN 3·384·128 + two norms 2·128, final norm 128.
  const int64_t block = 2 * 128 * 128 + 2 * 64 * 128 + 3 * 384 * 128 + 2 * 128;
  EXPECT_EQ(PlannedParameterCount(Load("debug_model.toml").model), 2 * 512 * 128 + 4 * block + 128);
}

// A Hugging Face shape: head_dim 24 with dim 64 and 4 heads (queries 96 wide), an explicit FFN
// size, tied embeddings — transformers counts 114,048 parameters for this LlamaForCausalLM.
TEST(MemoryPlanTest, ExplicitHeadDimFfnAndTiedEmbeddingsCountAsTransformersDoes) {
  ModelSection m;
  m.dim = 64;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.vocab_size = 301;
  m.head_dim = 24;
  m.intermediate_size = 150;
  m.tie_word_embeddings = true;
  EXPECT_EQ(PlannedParameterCount(m), 114048);
  m.tie_word_embeddings = false;
  EXPECT_EQ(PlannedParameterCount(m), 114048 + 301 * 64);
}

TEST(MemoryPlanTest, ReplicatedFloat32HoldsSixteenBytesPerParameter) {
  const JobConfig config = Load("debug_model.toml");
  const MemoryPlan plan = Plan(config, 1);
  const int64_t P = plan.parameter_count;
  const int64_t rope = 2 * 4 * config.model.max_seq_len * (128 / 8 / 2);
  EXPECT_EQ(plan.parameters, 4 * P + rope);
  EXPECT_EQ(plan.gradients, 4 * P);
  EXPECT_EQ(plan.optimizer_state, 8 * P);
  EXPECT_EQ(plan.gathered_parameters, 0);
  EXPECT_EQ(plan.ring_buffers, 0);
  EXPECT_GE(plan.total, plan.parameters + plan.gradients + plan.optimizer_state + plan.activations);
}

TEST(MemoryPlanTest, FsdpShardsWeightsGradientsAndOptimizerState) {
  const std::vector<std::string> fsdp = {"parallelism.data_parallel_shard_degree=-1",
                                         "parallelism.data_parallel_replicate_degree=1"};
  const JobConfig config = Load("debug_model.toml", fsdp);
  const MemoryPlan one = Plan(Load("debug_model.toml"), 1);
  for (int64_t F : {2, 4, 8}) {
    const MemoryPlan plan = Plan(config, F);
    EXPECT_EQ(plan.fsdp, F);
    const int64_t rope = one.parameters - 4 * one.parameter_count;
    // Each of the n + 2 units is padded to a multiple of F.
    EXPECT_GE((plan.parameters - rope) * F, 4 * one.parameter_count);
    EXPECT_LE((plan.parameters - rope) * F, 4 * (one.parameter_count + 6 * F));
    EXPECT_EQ(plan.gradients, plan.parameters - rope);
    EXPECT_EQ(plan.optimizer_state, 2 * plan.gradients);
    EXPECT_GT(plan.gathered_parameters, 0);        // float32 units, two at a time
    EXPECT_EQ(plan.activations, one.activations);  // same batch and length per rank
  }
}

// A checkpoint save: each writing rank writes (and, staging it, holds) its part of the weights and
// both moments — 12 bytes a parameter over the writers (the FSDP group, or the replicated world);
// 8B on 8 ranks: 12 GB each where gathering would hold 96 GB.
TEST(MemoryPlanTest, ACheckpointSaveCostsEachRankItsPart) {
  const JobConfig config = Load("llama3_8b.toml");
  for (int64_t world : {8, 16}) {  // FSDP over all of them (shard -1 × cp 8)
    const MemoryPlan plan = Plan(config, world);
    EXPECT_EQ(plan.checkpoint_writers, world);
    EXPECT_EQ(plan.checkpoint_bytes_written, 12 * ((kLlama3_8bParameters + world - 1) / world));
    EXPECT_EQ(plan.checkpoint_host_memory, plan.checkpoint_bytes_written);
  }
  const MemoryPlan replicated = Plan(Load("debug_model.toml"), 4);
  EXPECT_EQ(replicated.fsdp, 1);
  EXPECT_EQ(replicated.checkpoint_writers, 4);
  EXPECT_EQ(replicated.checkpoint_bytes_written, 12 * ((replicated.parameter_count + 3) / 4));
}

TEST(MemoryPlanTest, ReshardNeverKeepsEveryGatheredUnit) {
  const std::vector<std::string> fsdp = {"parallelism.data_parallel_shard_degree=4",
                                         "parallelism.data_parallel_replicate_degree=1"};
  std::vector<std::string> never = fsdp;
  never.push_back("parallelism.fsdp_reshard_after_forward=never");
  const MemoryPlan plan = Plan(Load("debug_model.toml", fsdp), 4);
  const MemoryPlan kept = Plan(Load("debug_model.toml", never), 4);
  EXPECT_EQ(kept.gathered_parameters, 4 * plan.parameter_count);
  EXPECT_LT(plan.gathered_parameters, kept.gathered_parameters);
  EXPECT_LT(plan.total, kept.total);
}

TEST(MemoryPlanTest, Bfloat16HalvesWhatIsSavedInTheComputeDtype) {
  const MemoryPlan f32 = Plan(Load("debug_model.toml"), 1);
  const MemoryPlan bf16 =
      Plan(Load("debug_model.toml", {"training.mixed_precision_param=bfloat16"}), 1);
  // Master weights, gradients and AdamW stay float32; the casts of all but the embedding are kept.
  EXPECT_EQ(bf16.parameters, f32.parameters);
  EXPECT_EQ(bf16.optimizer_state, f32.optimizer_state);
  EXPECT_EQ(bf16.gathered_parameters, 2 * (bf16.parameter_count - 512 * 128));
  EXPECT_LT(bf16.activations, f32.activations);
  EXPECT_GT(bf16.activations, f32.activations / 2);  // norms, RoPE and logits stay float32
}

TEST(MemoryPlanTest, ActivationCheckpointingKeepsLess) {
  const std::vector<std::string> big = {"model.n_layers=8", "training.seq_len=1024",
                                        "training.local_batch_size=1"};
  auto plan = [&](const std::vector<std::string>& ac) {
    std::vector<std::string> overrides = big;
    overrides.insert(overrides.end(), ac.begin(), ac.end());
    return Plan(Load("debug_model.toml", overrides), 1);
  };
  const MemoryPlan none = plan({});
  const MemoryPlan full = plan({"activation_checkpoint.mode=full"});
  const MemoryPlan every2 =
      plan({"activation_checkpoint.mode=selective", "activation_checkpoint.selective_ac_option=2"});
  const MemoryPlan op = plan({"activation_checkpoint.mode=selective"});
  EXPECT_EQ(full.ac_every, 1);
  EXPECT_EQ(every2.ac_every, 2);
  EXPECT_EQ(op.ac_every, -1);
  EXPECT_LT(full.activations, every2.activations);
  EXPECT_LT(every2.activations, none.activations);
  EXPECT_LT(full.activations, op.activations);
  EXPECT_LT(op.activations, none.activations);
  EXPECT_LT(full.total, none.total);
  EXPECT_EQ(full.parameters, none.parameters);
}

TEST(MemoryPlanTest, ContextParallelSplitsTheSequence) {
  const std::vector<std::string> base = {"training.seq_len=1024", "training.local_batch_size=1"};
  std::vector<std::string> cp2 = base;
  cp2.push_back("parallelism.context_parallel_degree=2");
  const MemoryPlan one = Plan(Load("debug_model.toml", base), 1);
  const MemoryPlan two = Plan(Load("debug_model.toml", cp2), 2);
  EXPECT_EQ(two.local_seq_len, 512);
  EXPECT_EQ(two.fsdp, 1);  // data_parallel_shard_degree = 1: the cp ranks are replicas
  EXPECT_EQ(two.parameters, one.parameters);
  EXPECT_EQ(one.ring_buffers, 0);
  // (2 blocks + 2 accumulators) × (2, B, Hk, Lc, D) float32.
  EXPECT_EQ(two.ring_buffers, 4 * 4 * 2 * 1 * 4 * 512 * 16);
  EXPECT_LT(two.activations, one.activations);
  EXPECT_GT(two.activations, one.activations / 2 - one.activations / 8);
}

TEST(MemoryPlanTest, UlyssesHoldsItsGroupsSequenceAndEachMethodSendsItsOwnBytes) {
  // The debug model: 8 heads, 4 K/V heads of 16, float32; cp 4, L 1024: Lc = 256.
  const std::vector<std::string> cp4 = {"training.seq_len=1024", "training.local_batch_size=1",
                                        "parallelism.context_parallel_degree=4"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), cp4.begin(), cp4.end());
    return Load("debug_model.toml", extra);
  };
  const JobConfig ring_config = with({});
  const int64_t layers = ring_config.model.n_layers;
  const MemoryPlan ring = Plan(ring_config, 4);
  const MemoryPlan ulysses = Plan(with({"parallelism.context_parallel_method=ulysses"}), 4);
  const MemoryPlan hybrid = Plan(with({"parallelism.context_parallel_method=hybrid",
                                       "parallelism.context_parallel_ulysses_degree=2"}),
                                 4);
  EXPECT_EQ(ulysses.mesh.ulysses, 4);
  EXPECT_EQ(hybrid.mesh.ulysses, 2);
  // Ring: 3 of 4 blocks (2, 1, 4, 256, 16) float32 come in forward, and in backward again, each
  // block's dK/dV accumulator going round all 4 (alltoall) or 3 dK/dV coming home (allgather).
  // (Measured by ringtrain-bench item 9: the bytes the ranks report are exactly these.)
  const int64_t kv_block = 4 * 2 * 4 * 256 * 16;
  EXPECT_EQ(ring.attention_bytes_per_step, layers * (3 + 3 + 4) * kv_block);
  const MemoryPlan allgather =
      Plan(with({"parallelism.context_parallel_rotate_method=allgather"}), 4);
  EXPECT_EQ(allgather.attention_bytes_per_step, layers * (3 + 3 + 3) * kv_block);
  EXPECT_EQ(ring.ulysses_buffers, 0);
  // Ulysses: no ring; 3/4 of each all-to-all leaves the rank. Forward: Q (256 × 128) and K/V
  // (2 × 256 × 64) out, the output and the log-sum-exp (8 × 256) back; backward: Q, K/V, the
  // output, its gradient and the log-sum-exp out, dQ and dK/dV back.
  EXPECT_EQ(ulysses.ring_buffers, 0);
  EXPECT_GT(ulysses.ulysses_buffers, 0);
  const int64_t q = 4 * 256 * 128, kv = 4 * 2 * 256 * 64, lse = 4 * 8 * 256;
  EXPECT_EQ(ulysses.attention_bytes_per_step,
            layers * 3 * ((q + kv + q + lse) + (q + kv + 2 * q + lse + q + kv)) / 4);
  // Hybrid 2 × 2 sits between: half of each all-to-all, and a ring of 2 with blocks of 2 heads
  // over 512 positions.
  EXPECT_GT(hybrid.ring_buffers, 0);
  EXPECT_GT(hybrid.ulysses_buffers, 0);
  EXPECT_LT(ulysses.attention_bytes_per_step, hybrid.attention_bytes_per_step);
  EXPECT_LT(hybrid.attention_bytes_per_step, ring.attention_bytes_per_step);
}

TEST(MemoryPlanTest, ShardDegreeMinusOneShardsOverCp) {
  const MemoryPlan plan =
      Plan(Load("debug_model.toml", {"parallelism.data_parallel_shard_degree=-1",
                                     "parallelism.data_parallel_replicate_degree=1",
                                     "parallelism.context_parallel_degree=2"}),
           2);
  EXPECT_EQ(plan.mesh.shard, 1);
  EXPECT_EQ(plan.fsdp, 2);
  EXPECT_LT(plan.optimizer_state, 8 * plan.parameter_count);
}

TEST(MemoryPlanTest, GradientAccumulationKeepsTheGradientsThroughTheForward) {
  const MemoryPlan one = Plan(Load("debug_model.toml"), 1);
  const MemoryPlan two = Plan(Load("debug_model.toml", {"training.global_batch_size=16"}), 1);
  EXPECT_EQ(two.activations, one.activations);  // one micro-batch of 8 at a time
  // Every gradient through the forward; without accumulation the peak (the loss's backward)
  // already holds the output projection's and the last block's.
  EXPECT_GT(two.total, one.total);
  EXPECT_LE(two.total, one.total + one.gradients);
}

TEST(MemoryPlanTest, LargestFittingSeqLenIsTheLastThatFits) {
  const JobConfig config = Load("llama3_8b.toml");
  const int64_t device = int64_t{80} << 30;
  const int64_t seq =
      LargestFittingSeqLen(config, *ResolveMesh(config, 8), PlanDevice::kCuda, device);
  ASSERT_GT(seq, 0);
  EXPECT_EQ(seq % 16, 0);  // headtail over cp 8
  JobConfig at = config;
  at.training.seq_len = seq;
  at.model.max_seq_len = seq;
  EXPECT_TRUE(Plan(at, 8).Fits(device));
  at.training.seq_len = at.model.max_seq_len = seq + 16;
  EXPECT_FALSE(Plan(at, 8).Fits(device));
  // A device smaller than the weights' shards fits nothing.
  EXPECT_EQ(
      LargestFittingSeqLen(config, *ResolveMesh(config, 8), PlanDevice::kCuda, int64_t{1} << 30),
      0);
}

// The chunked loss holds a chunk of logits, not (B, Lc, V): for 8B at 256 Ki tokens over cp 8
// (32 Ki a rank) the two float32 (B, Lc, V) tensors would be 31.3 GiB; a chunk of
// LossChunkRows(128256) = 130 rows is 64 MiB on a CPU, of 1046 rows 512 MiB on a GPU.
TEST(MemoryPlanTest, TheChunkedLossNeverHoldsTheWholeLogits) {
  const JobConfig config =
      Load("llama3_8b.toml", {"training.seq_len=262144", "model.max_seq_len=262144"});
  const MemoryPlan plan = Plan(config, 8);
  const int64_t whole_logits = int64_t{4} * 32768 * 128256;
  EXPECT_LT(plan.largest_transient, whole_logits / 4) << plan.largest_transient_what;
  EXPECT_EQ(LossChunkRows(128256), 130);
  EXPECT_EQ(LossChunkRows(128256, /*on_gpu=*/true), 1046);  // 512 MiB
  EXPECT_TRUE(plan.Fits(int64_t{80} << 30));
}

// CPU ranks run the fused blocks, which keep less for the backward than the ATen chains.
// fsdp_gradient_sync = "step" with accumulation holds every unit's unsharded float32 gradient
// (padded to the group) between the micro-batches; without accumulation, or reducing per
// micro-batch, nothing is held.
TEST(MemoryPlanTest, ReducingOncePerStepHoldsTheUnshardedGradients) {
  const std::vector<std::string> mesh = {"parallelism.data_parallel_shard_degree=4",
                                         "training.local_batch_size=1"};
  auto plan = [&](std::vector<std::string> more) {
    more.insert(more.end(), mesh.begin(), mesh.end());
    const JobConfig config = Load("debug_model.toml", more);
    return PlanMemory(config, *ResolveMesh(config, 4), PlanDevice::kCpu);
  };
  const MemoryPlan once =
      plan({"parallelism.fsdp_gradient_sync=step", "training.global_batch_size=8"});
  const MemoryPlan every = plan({"training.global_batch_size=8"});
  const MemoryPlan single = plan({"parallelism.fsdp_gradient_sync=step"});
  // Units: the embedding (512 × 128), four blocks, the final norm with the output (128 + 512 ×
  // 128).
  const int64_t block =
      (PlannedParameterCount(Load("debug_model.toml").model) - 2 * 512 * 128 - 128) / 4;
  const int64_t padded = 512 * 128 + 4 * ((block + 3) / 4 * 4) + (128 + 512 * 128 + 3) / 4 * 4;
  EXPECT_EQ(once.held_gradients, 4 * padded);
  EXPECT_EQ(every.held_gradients, 0);
  EXPECT_EQ(single.held_gradients, 0);
  EXPECT_EQ(once.total, every.total + once.held_gradients) << once.peak_phase;
}

TEST(MemoryPlanTest, CpuRanksKeepLessWithTheFusedBlocks) {
  const JobConfig config = Load("debug_model.toml");
  const MeshDegrees mesh = *ResolveMesh(config, 1);
  const MemoryPlan cuda = PlanMemory(config, mesh, PlanDevice::kCuda);
  const MemoryPlan cpu = PlanMemory(config, mesh, PlanDevice::kCpu);
  EXPECT_LT(cpu.activations, cuda.activations);
  EXPECT_EQ(cpu.parameters, cuda.parameters);
}

}  // namespace
}  // namespace ringtrain
