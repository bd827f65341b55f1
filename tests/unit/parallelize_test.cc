// Parallelize on one rank (worker/engine/parallel/parallelize.h): the local attention plan and the
// config's precision are applied to the model, the data sharding is
// the identity, and the replicated gradient path's step is bitwise the one written out by hand
// (clip by global norm, then AdamW over the model's parameters by name).
#include "worker/engine/parallel/parallelize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/unit/tiny_job_config.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/optim/clip.h"

namespace ringtrain {
namespace {

using ::testing::StartsWith;

JobConfig TinyConfig(const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<JobConfig> config = ParseJobConfig(kTinyJobConfig, overrides, "tiny");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

Transformer MakeModel(const JobConfig& config) {
  torch::manual_seed(7);
  Transformer model(ModelArgs::FromConfig(config.model));
  model->init_weights();
  return model;
}

at::Tensor Loss(Transformer& model, const ShardedBatch& batch) {
  return model->forward(batch.inputs, batch.positions).square().mean();
}

TEST(ParallelizeTest, OneRankIsLocalAttentionAndTheReplicatedStep) {
  const JobConfig config = TinyConfig({"training.attention_kernel=tiled"});
  const Mesh mesh;  // one rank
  Transformer model = MakeModel(config);
  Transformer reference = MakeModel(config);
  Parallelized p = Parallelize(config, mesh, /*comm=*/nullptr, c10::Device(c10::kCPU), *model);
  EXPECT_THAT(p.attention->Describe(), StartsWith("local, tiled"));
  EXPECT_FALSE(p.gradients->gather_is_collective());
  EXPECT_EQ(p.gradients->parameters().size(), model->parameters().size());

  const at::Tensor tokens = torch::randint(0, config.model.vocab_size, {2, 64}, torch::kInt64);
  const ShardedBatch batch = p.data.Shard(tokens, tokens);
  EXPECT_TRUE(torch::equal(batch.inputs, tokens));  // cp = 1: the identity

  // The gradient path's step.
  p.gradients->ZeroGrad();
  Loss(model, batch).backward();
  p.gradients->FinishBackward();
  const double norm = p.gradients->ClipGradNorm(config.training.max_norm);
  p.gradients->Step(1e-3);

  // The same step by hand on an identical model.
  Loss(reference, batch).backward();
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& item : reference->named_parameters())
    named.emplace_back(item.key(), item.value());
  const OptimizerSection& o = config.optimizer;
  AdamW adam(named, AdamWOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
  EXPECT_EQ(norm, ClipGradNorm(reference->parameters(), config.training.max_norm));
  adam.Step(1e-3);

  const FullState state = p.gradients->GatherFullState();
  ASSERT_EQ(state.model.size(), named.size());
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(state.model[i].first, named[i].first);
    EXPECT_TRUE(torch::equal(state.model[i].second, named[i].second)) << named[i].first;
  }
  const auto by_hand = adam.StateDict();
  ASSERT_EQ(state.optimizer.size(), by_hand.size());
  for (size_t i = 0; i < by_hand.size(); ++i) {
    EXPECT_EQ(state.optimizer[i].first, by_hand[i].first);
    EXPECT_TRUE(torch::equal(state.optimizer[i].second, by_hand[i].second)) << by_hand[i].first;
  }
  // And it loads back (the replicated format).
  EXPECT_TRUE(p.gradients->LoadOptimizerState(state.optimizer, "state").ok());
}

TEST(ParallelizeTest, AppliesPrecision) {
  const JobConfig config = TinyConfig({"training.mixed_precision_param=bfloat16"});
  Transformer model = MakeModel(config);
  Parallelize(config, Mesh{}, nullptr, c10::Device(c10::kCPU), *model);
  EXPECT_EQ(model->compute_dtype(), at::kBFloat16);
}

}  // namespace
}  // namespace ringtrain
