// Activation checkpointing and the ParamSource seam of the Llama model, on the debug model's shape.
// With every block checkpointed (full), every second one (selective 2) or every block keeping its
// attention (selective op), the loss and every parameter gradient are bitwise those without
// checkpointing — float32 and bfloat16 compute, one rank and two ring-attention ranks (threads) —
// and op never runs the attention forward again. A ParamSource set on the model supplies every
// unit's weights, in forward order, and again for each checkpointed block's recompute.
#include "worker/engine/model/llama.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "common/config/job_config.h"
#include "tests/unit/thread_world.h"
#include "worker/engine/model/param_source.h"
#include "worker/engine/parallel/cp_shard.h"
#include "worker/engine/parallel/ring_attention.h"

namespace ringtrain {
namespace {

std::string SourceDir() {
  const char* dir = std::getenv("RINGTRAIN_SOURCE_DIR");
  return dir ? dir : RINGTRAIN_DEFAULT_SOURCE_DIR;
}

ModelArgs DebugArgs() {
  auto config = LoadJobConfig(SourceDir() + "/configs/debug_model.toml", {});
  EXPECT_TRUE(config.ok()) << config.status();
  return ModelArgs::FromConfig(config->model);
}

// An attention kernel that counts its Forward calls (the first forward's and the recomputes').
template <typename Kernel>
class Counting : public Kernel {
 public:
  using Kernel::Kernel;
  BlockOutput Forward(const at::Tensor& q, const at::Tensor& kv, const BlockPositions& positions,
                      double scale) override {
    ++forwards;
    return Kernel::Forward(q, kv, positions, scale);
  }
  int64_t forwards = 0;
};

Transformer MakeModel(const ModelArgs& args, uint64_t seed, c10::ScalarType dtype, int64_t every) {
  torch::manual_seed(seed);
  Transformer model(args);
  model->init_weights(seed);
  model->SetComputeDtype(dtype);
  model->SetActivationCheckpoint(every);
  return model;
}

struct Batch {
  at::Tensor tokens, labels;  // (B, L) int64
  BlockPositions positions;   // (L,)
};

Batch MakeBatch(const ModelArgs& args, int64_t batch, int64_t length) {
  torch::manual_seed(11);
  Batch b{torch::randint(args.vocab_size, {batch, length}),
          torch::randint(args.vocab_size, {batch, length}),
          {}};
  b.positions.positions.resize(length);
  std::iota(b.positions.positions.begin(), b.positions.positions.end(), 0);
  return b;
}

// This rank's shard of the batch (head-tail, as the trainer's cp_shard).
Batch ShardOf(const Batch& full, int64_t cp, int64_t rank) {
  const BlockPositions pos{ShardPositions(full.tokens.size(1), cp, rank, LoadBalancer::kHeadTail)};
  const at::Tensor idx = pos.AsTensor();
  return {full.tokens.index_select(1, idx), full.labels.index_select(1, idx), pos};
}

// One forward and backward: the loss (summed token cross-entropy over `tokens` tokens).
at::Tensor Step(Transformer& model, const Batch& b, double tokens) {
  model->zero_grad();
  const at::Tensor logits = model->forward(b.tokens, b.positions);
  const at::Tensor loss =
      torch::nn::functional::cross_entropy(
          logits.flatten(0, 1), b.labels.flatten(),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
      tokens;
  loss.backward();
  return loss.detach();
}

using Grads = std::vector<std::pair<std::string, at::Tensor>>;

Grads GradsOf(Transformer& model) {
  Grads grads;
  for (const auto& p : model->named_parameters()) grads.emplace_back(p.key(), p.value().grad());
  return grads;
}

void ExpectBitwiseEqual(const at::Tensor& loss, const Grads& grads, const at::Tensor& want_loss,
                        const Grads& want_grads) {
  EXPECT_TRUE(torch::equal(loss, want_loss))
      << loss.item<double>() << " vs " << want_loss.item<double>();
  ASSERT_EQ(grads.size(), want_grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const auto& [name, grad] = grads[i];
    ASSERT_EQ(name, want_grads[i].first);
    ASSERT_TRUE(want_grads[i].second.defined()) << name;
    ASSERT_TRUE(grad.defined()) << name << ": no gradient";
    EXPECT_EQ(grad.scalar_type(), at::kFloat) << name;
    EXPECT_TRUE(torch::equal(grad, want_grads[i].second))
        << name << ": max |diff| " << (grad - want_grads[i].second).abs().max().item<double>();
  }
}

struct AcCase {
  std::string name;
  int64_t every;  // SetActivationCheckpoint
  c10::ScalarType dtype;
  std::vector<int64_t> checkpointed;  // layer ids, of the debug model's 4
  bool recomputes_attention;
};
void PrintTo(const AcCase& c, std::ostream* os) { *os << c.name; }

std::vector<AcCase> Cases() {
  std::vector<AcCase> cases;
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const std::string suffix = dtype == at::kFloat ? "_float32" : "_bfloat16";
    cases.push_back({"full" + suffix, 1, dtype, {0, 1, 2, 3}, true});
    cases.push_back({"selective2" + suffix, 2, dtype, {0, 2}, true});
    cases.push_back({"op" + suffix, -1, dtype, {0, 1, 2, 3}, false});
  }
  return cases;
}

class ActivationCheckpointTest : public ::testing::TestWithParam<AcCase> {};

TEST_P(ActivationCheckpointTest, LossAndGradientsBitwiseEqualToNoCheckpointing) {
  const AcCase& c = GetParam();
  const ModelArgs args = DebugArgs();
  ASSERT_EQ(args.n_layers, 4);
  const Batch batch = MakeBatch(args, 1, 64);
  const double tokens = 64;

  Transformer plain = MakeModel(args, 3, c.dtype, 0);
  auto plain_kernel = std::make_shared<Counting<LocalAttentionPlan>>();
  plain->SetAttentionPlan(plain_kernel);
  const at::Tensor want_loss = Step(plain, batch, tokens);
  EXPECT_EQ(plain_kernel->forwards, args.n_layers);

  Transformer model = MakeModel(args, 3, c.dtype, c.every);
  auto kernel = std::make_shared<Counting<LocalAttentionPlan>>();
  model->SetAttentionPlan(kernel);
  const at::Tensor loss = Step(model, batch, tokens);
  ExpectBitwiseEqual(loss, GradsOf(model), want_loss, GradsOf(plain));
  // Full and selective N run the attention again in each recompute; op replays the first one.
  const int64_t recomputed = c.recomputes_attention ? int64_t(c.checkpointed.size()) : 0;
  EXPECT_EQ(kernel->forwards, args.n_layers + recomputed);
}

INSTANTIATE_TEST_SUITE_P(Modes, ActivationCheckpointTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// Under no_grad (validation) nothing is checkpointed: each attention runs once.
TEST(ActivationCheckpointNoGradTest, ForwardWithoutGradModeIsThePlainForward) {
  const ModelArgs args = DebugArgs();
  const Batch batch = MakeBatch(args, 2, 32);
  Transformer plain = MakeModel(args, 3, at::kFloat, 0);
  Transformer model = MakeModel(args, 3, at::kFloat, 1);
  auto kernel = std::make_shared<Counting<LocalAttentionPlan>>();
  model->SetAttentionPlan(kernel);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(model->forward(batch.tokens, batch.positions),
                           plain->forward(batch.tokens, batch.positions)));
  EXPECT_EQ(kernel->forwards, args.n_layers);
}

// ---- ParamSource ----

TEST(ModelUnitsTest, UnitsListTheNamedParametersInOrder) {
  const ModelArgs args = DebugArgs();
  Transformer model(args);
  const auto units = model->Units();
  ASSERT_EQ(int64_t(units.size()), args.n_layers + 2);
  ASSERT_EQ(units.front().size(), 1u);
  EXPECT_EQ(units.front()[0].first, "tok_embeddings.weight");
  for (int64_t i = 1; i <= args.n_layers; ++i) {
    ASSERT_EQ(units[i].size(), 9u);
    EXPECT_EQ(units[i][0].first, "layers." + std::to_string(i - 1) + ".attention.wq.weight");
    EXPECT_EQ(units[i][8].first, "layers." + std::to_string(i - 1) + ".ffn_norm.weight");
  }
  ASSERT_EQ(units.back().size(), 2u);
  EXPECT_EQ(units.back()[0].first, "norm.weight");
  EXPECT_EQ(units.back()[1].first, "output.weight");
  const auto params = model->named_parameters();
  size_t i = 0;
  for (const auto& unit : units) {
    for (const auto& [name, tensor] : unit) {
      ASSERT_LT(i, params.size());
      EXPECT_EQ(name, params[i].key());
      EXPECT_TRUE(tensor.is_same(params[i].value())) << name;
      ++i;
    }
  }
  EXPECT_EQ(i, params.size());
}

// Serves the parameters of another model's units, and records every call.
class RecordingSource : public ParamSource {
 public:
  explicit RecordingSource(std::vector<UnitParameters> units) : units_(std::move(units)) {}

  std::vector<at::Tensor> Gather(int64_t unit, bool recompute) override {
    calls.push_back(Call("gather", unit, recompute));
    std::vector<at::Tensor> weights;
    for (const auto& [name, tensor] : units_.at(unit)) weights.push_back(tensor);
    return weights;
  }
  at::Tensor AfterForward(int64_t unit, const at::Tensor& output, bool recompute) override {
    calls.push_back(Call("after", unit, recompute));
    return output;
  }

  static std::string Call(const std::string& what, int64_t unit, bool recompute) {
    return what + " " + std::to_string(unit) + (recompute ? " recompute" : "");
  }
  std::vector<std::string> calls;

 private:
  std::vector<UnitParameters> units_;
};

class ParamSourceTest : public ::testing::TestWithParam<AcCase> {};

// The model computes with the source's weights (another model's, seed 7) and their gradients go
// there: bitwise the plain model of seed 7, while its own parameters get none.
TEST_P(ParamSourceTest, ForwardUsesTheSourcesWeightsAndGathersAgainToRecompute) {
  const AcCase& c = GetParam();
  const ModelArgs args = DebugArgs();
  const Batch batch = MakeBatch(args, 1, 64);
  const double tokens = 64;
  Transformer reference = MakeModel(args, 7, c.dtype, 0);
  const at::Tensor want_loss = Step(reference, batch, tokens);

  Transformer served = MakeModel(args, 7, c.dtype, 0);
  Transformer model = MakeModel(args, 3, c.dtype, c.every);
  auto source = std::make_shared<RecordingSource>(served->Units());
  model->SetParamSource(source);
  const at::Tensor loss = Step(model, batch, tokens);
  ExpectBitwiseEqual(loss, GradsOf(served), want_loss, GradsOf(reference));
  for (const auto& [name, grad] : GradsOf(model)) EXPECT_FALSE(grad.defined()) << name;

  // Forward: every unit in order; backward: the checkpointed blocks, last first.
  std::vector<std::string> expected;
  for (int64_t unit = 0; unit <= args.n_layers + 1; ++unit) {
    expected.push_back(RecordingSource::Call("gather", unit, false));
    expected.push_back(RecordingSource::Call("after", unit, false));
  }
  for (auto it = c.checkpointed.rbegin(); it != c.checkpointed.rend(); ++it) {
    expected.push_back(RecordingSource::Call("gather", *it + 1, true));
    expected.push_back(RecordingSource::Call("after", *it + 1, true));
  }
  EXPECT_EQ(source->calls, expected);
}

std::vector<AcCase> SourceCases() {
  std::vector<AcCase> cases = {{"none_float32", 0, at::kFloat, {}, false},
                               {"none_bfloat16", 0, at::kBFloat16, {}, false}};
  for (const AcCase& c : Cases()) cases.push_back(c);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Modes, ParamSourceTest, ::testing::ValuesIn(SourceCases()),
                         [](const auto& info) { return info.param.name; });

// ---- Two ring-attention ranks ----

// cp = 2 on threads, head-tail shards: each rank's loss and gradients under full and op equal its
// own without checkpointing, bitwise; full recomputes run the ring again, op's do not.
TEST(ActivationCheckpointRingTest, Cp2BitwiseEqualToNoCheckpointing) {
  const ModelArgs args = DebugArgs();
  const int64_t cp = 2, length = 64;
  const Batch batch = MakeBatch(args, 1, length);
  const std::vector<int64_t> modes = {0, 1, -1};  // none, full, op
  // Built here: the weights come from the global generator, which the rank threads share.
  std::vector<std::vector<Transformer>> models(cp);
  for (auto& rank_models : models) {
    for (int64_t every : modes) rank_models.push_back(MakeModel(args, 3, at::kFloat, every));
  }
  struct RankRun {
    at::Tensor loss;
    Grads grads;
    int64_t forwards = 0;
  };
  std::vector<std::vector<RankRun>> runs(cp, std::vector<RankRun>(modes.size()));
  RunOnThreads(cp, 1, [&](int64_t r, Communicator& comm) {
    const Batch shard = ShardOf(batch, cp, r);
    for (size_t m = 0; m < modes.size(); ++m) {
      auto kernel = std::make_shared<Counting<RingAttentionPlan>>(
          &comm, length, LoadBalancer::kHeadTail, RotateMethod::kAllToAll);
      models[r][m]->SetAttentionPlan(kernel);
      runs[r][m].loss = Step(models[r][m], shard, double(length));
      runs[r][m].grads = GradsOf(models[r][m]);
      runs[r][m].forwards = kernel->forwards;
    }
  });
  for (int64_t r = 0; r < cp; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(runs[r][0].loss.defined());
    EXPECT_EQ(runs[r][0].forwards, args.n_layers);
    ExpectBitwiseEqual(runs[r][1].loss, runs[r][1].grads, runs[r][0].loss, runs[r][0].grads);
    EXPECT_EQ(runs[r][1].forwards, 2 * args.n_layers);
    ExpectBitwiseEqual(runs[r][2].loss, runs[r][2].grads, runs[r][0].loss, runs[r][0].grads);
    EXPECT_EQ(runs[r][2].forwards, args.n_layers);
  }
}

}  // namespace
}  // namespace ringtrain
