// Parallelize on one rank (worker/engine/parallel/parallelize.h): the local attention plan and the
// config's precision are applied to the model, the data sharding is
// the identity, and the replicated gradient path's step is bitwise the one written out by hand
// (clip by global norm, then AdamW over the model's parameters by name); its checkpoint pieces are
// that state and load back.
#include "worker/engine/parallel/parallelize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "tests/unit/tiny_job_config.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/optim/clip.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

JobConfig TinyConfig(const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<JobConfig> config = ParseJobConfig(kTinyJobConfig, overrides, "tiny");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

Transformer MakeModel(const JobConfig& config) {
  torch::manual_seed(7);
  Transformer model(ModelArgs::FromConfig(config.model));
  model->init_weights(7);
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
  EXPECT_EQ(p.gradients->checkpoint_writers(), 1);
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

  // One rank's checkpoint pieces are the whole parameters and moments, equal to the hand-made
  // step's.
  std::map<std::string, at::Tensor> want;
  for (const auto& [name, t] : named) want["model." + name] = t.detach();
  const auto by_hand = adam.StateDict();
  for (const auto& [name, t] : by_hand) {
    if (name != "step") want["optimizer." + name] = t;
  }
  const std::vector<StatePiece> pieces = p.gradients->CheckpointPieces();
  ASSERT_EQ(pieces.size(), want.size());
  StateDict saved;
  for (const StatePiece& piece : pieces) {
    ASSERT_TRUE(want.count(piece.name)) << piece.name;
    EXPECT_EQ(piece.begin, 0);
    EXPECT_EQ(piece.end, want[piece.name].numel());
    EXPECT_TRUE(torch::equal(piece.data, want[piece.name].reshape(-1))) << piece.name;
    saved.emplace_back(piece.name, piece.data.view(piece.shape).clone());
  }
  // And they load back into a fresh path: the same parameters and moments.
  Transformer fresh = MakeModel(config);
  Parallelized q = Parallelize(config, mesh, nullptr, c10::Device(c10::kCPU), *fresh);
  const DictStateReader reader("saved", {{"", saved}});
  ASSERT_TRUE(q.gradients->LoadParameters(reader, "model.").ok());
  ASSERT_TRUE(q.gradients->LoadOptimizer(reader, /*optimizer_step=*/1).ok());
  EXPECT_EQ(q.gradients->optimizer_step(), 1);
  for (const StatePiece& piece : q.gradients->CheckpointPieces()) {
    EXPECT_TRUE(torch::equal(piece.data, want[piece.name].reshape(-1))) << piece.name;
  }
  // A reader without the moments is refused, naming them.
  StateDict weights;
  for (const auto& item : reference->named_parameters())
    weights.emplace_back(item.key(), item.value().detach());
  const DictStateReader model_only("weights.pt", {{"model.", weights}});
  const absl::Status refused = q.gradients->LoadOptimizer(model_only, 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("weights.pt"));
}

TEST(ParallelizeTest, AppliesPrecision) {
  const JobConfig config = TinyConfig({"training.mixed_precision_param=bfloat16"});
  Transformer model = MakeModel(config);
  Parallelize(config, Mesh{}, nullptr, c10::Device(c10::kCPU), *model);
  EXPECT_EQ(model->compute_dtype(), at::kBFloat16);
}

}  // namespace
}  // namespace ringtrain
