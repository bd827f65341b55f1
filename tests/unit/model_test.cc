// Model shape arithmetic, parameter names, RoPE at positions, and initialisation determinism.
#include "worker/engine/model/llama.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "common/config/job_config.h"
#include "worker/engine/model/model_args.h"
#include "worker/engine/model/rope.h"

namespace ringtrain {
namespace {

std::string SourceDir() {
  const char* dir = std::getenv("RINGTRAIN_SOURCE_DIR");
  return dir ? dir : RINGTRAIN_DEFAULT_SOURCE_DIR;
}

ModelArgs ArgsOf(const std::string& config_file) {
  auto config = LoadJobConfig(SourceDir() + "/configs/" + config_file, {});
  EXPECT_TRUE(config.ok()) << config.status();
  return ModelArgs::FromConfig(config->model);
}

TEST(ModelArgsTest, Llama3_8BShapes) {
  const ModelArgs a = ArgsOf("llama3_8b.toml");
  EXPECT_EQ(a.ffn_hidden_dim(), 14336);  // int(2·4·4096/3) = 10922, ×1.3 = 14198, ↑1024
  EXPECT_EQ(a.head_dim(), 128);
  const auto shapes = ParameterShapes(a);
  ASSERT_EQ(shapes.size(), 2u + 9u * 32u + 1u);
  EXPECT_EQ(shapes.front().first, "tok_embeddings.weight");
  EXPECT_EQ(shapes.front().second, (std::vector<int64_t>{128256, 4096}));
  EXPECT_EQ(shapes[2].first, "layers.0.attention.wk.weight");
  EXPECT_EQ(shapes[2].second, (std::vector<int64_t>{1024, 4096}));
  EXPECT_EQ(shapes[5].first, "layers.0.feed_forward.w1.weight");
  EXPECT_EQ(shapes[5].second, (std::vector<int64_t>{14336, 4096}));
  EXPECT_EQ(shapes.back().first, "output.weight");
  // Llama 3 8B has 8,030,261,248 parameters.
  EXPECT_EQ(ParameterCount(a), 8030261248);
}

TEST(ModelArgsTest, FfnHiddenDimRounding) {
  ModelArgs a;
  a.dim = 256;
  a.multiple_of = 256;
  EXPECT_EQ(a.ffn_hidden_dim(), 768);  // int(2·1024/3) = 682 → 768
  a.multiple_of = 1;
  EXPECT_EQ(a.ffn_hidden_dim(), 682);
  a.ffn_dim_multiplier = 1.5;
  EXPECT_EQ(a.ffn_hidden_dim(), 1023);
}

// The model's parameters are ParameterShapes(a), names and shapes, in order.
void ExpectParametersAreTheShapes(Transformer& model, const ModelArgs& a) {
  const auto params = model->named_parameters();
  const auto expected = ParameterShapes(a);
  ASSERT_EQ(params.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(params[i].key(), expected[i].first);
    EXPECT_EQ(params[i].value().sizes().vec(), expected[i].second) << expected[i].first;
  }
}

TEST(TransformerTest, DebugModelParameterNamesAndShapesMatchTorchtitan) {
  const ModelArgs a = ArgsOf("debug_model.toml");
  Transformer model(a);
  ExpectParametersAreTheShapes(model, a);
}

TEST(TransformerTest, InitIsDeterministicAndFollowsTorchtitan) {
  const ModelArgs a = ArgsOf("debug_model.toml");
  // The seed alone decides: the torch generator's state does not enter.
  torch::manual_seed(1);
  Transformer m1(a);
  m1->init_weights(5);
  torch::manual_seed(2);
  Transformer m2(a);
  m2->init_weights(5);
  Transformer other(a);
  other->init_weights(6);
  const auto p1 = m1->named_parameters(), p2 = m2->named_parameters();
  const auto p3 = other->named_parameters();
  for (size_t i = 0; i < p1.size(); ++i) {
    EXPECT_TRUE(torch::equal(p1[i].value(), p2[i].value())) << p1[i].key();
    if (p1[i].key().find("norm") == std::string::npos) {
      EXPECT_FALSE(torch::equal(p1[i].value(), p3[i].value())) << p1[i].key();
    }
  }
  EXPECT_NEAR(p1["tok_embeddings.weight"].std().item<double>(), 1.0, 0.02);
  EXPECT_NEAR(p1["tok_embeddings.weight"].mean().item<double>(), 0.0, 0.02);
  EXPECT_NEAR(p1["layers.0.attention.wq.weight"].std().item<double>(), 0.02, 0.002);
  // Depth init: layer 3's output projection has std 0.02 / sqrt(8).
  EXPECT_NEAR(p1["layers.3.attention.wo.weight"].std().item<double>(), 0.02 / std::sqrt(8.0),
              0.001);
  const double final_std = 1.0 / std::sqrt(double(a.dim));
  EXPECT_LE(p1["output.weight"].abs().max().item<double>(), 3 * final_std + 1e-6);
  EXPECT_NEAR(p1["output.weight"].std().item<double>(), final_std * 0.9866, final_std * 0.03);
  EXPECT_TRUE(torch::all(p1["norm.weight"] == 1).item<bool>());
}

// RoPE against an explicit complex rotation in double precision at arbitrary positions.
TEST(RopeTest, RotatesInterleavedPairsAtGivenPositions) {
  const int64_t dim = 8;
  const double theta = 10000.0;
  RotaryTables rope(dim, 64, theta);
  torch::manual_seed(1);
  const auto x = torch::randn({2, 3, 2, dim});
  const auto positions = torch::tensor(std::vector<int64_t>{5, 0, 63});
  const auto y = rope.Apply(x, positions);
  const auto xa = x.accessor<float, 4>();
  const auto ya = y.accessor<float, 4>();
  const std::vector<int64_t> pos = {5, 0, 63};
  for (int b = 0; b < 2; ++b)
    for (int l = 0; l < 3; ++l)
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < dim / 2; ++i) {
          const double angle = pos[l] * std::pow(theta, -2.0 * i / dim);
          const double re = xa[b][l][h][2 * i], im = xa[b][l][h][2 * i + 1];
          EXPECT_NEAR(ya[b][l][h][2 * i], re * std::cos(angle) - im * std::sin(angle), 2e-5);
          EXPECT_NEAR(ya[b][l][h][2 * i + 1], re * std::sin(angle) + im * std::cos(angle), 2e-5);
        }
}

// Llama 3.1's frequency scaling, against its definition in double precision: wavelengths below
// original / high_freq_factor kept, above original / low_freq_factor divided by factor, between
// interpolated smoothly.
TEST(RopeTest, Llama3ScalingFollowsItsDefinition) {
  const int64_t head_dim = 64;
  const double theta = 500000.0;
  RopeScaling s;
  s.type = RopeType::kLlama3;
  s.factor = 32.0;
  s.original_max_position_embeddings = 8192;
  const at::Tensor scaled = RotaryTables::InverseFrequencies(head_dim, theta, s);
  const at::Tensor plain = RotaryTables::InverseFrequencies(head_dim, theta, {});
  ASSERT_EQ(scaled.numel(), head_dim / 2);
  int kept = 0, divided = 0, smoothed = 0;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double f = std::pow(theta, -2.0 * i / head_dim), wavelen = 2 * M_PI / f;
    double want = f;
    if (wavelen > 8192.0 / 1.0) {
      want = f / 32.0;
      ++divided;
    } else if (wavelen >= 8192.0 / 4.0) {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * f / 32.0 + smooth * f;
      ++smoothed;
    } else {
      ++kept;
      EXPECT_EQ(scaled[i].item<float>(), plain[i].item<float>()) << i;
    }
    EXPECT_NEAR(scaled[i].item<double>(), want, 1e-6 * want) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

// A small model with tied embeddings (dim 64, 2 layers, 4 heads, 2 kv heads, vocab 301).
ModelArgs SmallTiedArgs() {
  ModelArgs a;
  a.dim = 64;
  a.n_layers = 2;
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.vocab_size = 301;
  a.tie_word_embeddings = true;
  a.max_seq_len = 64;
  return a;
}

TEST(TransformerTest, TiedEmbeddingsAreOneParameterExplicitShapesAreTaken) {
  ModelArgs a = SmallTiedArgs();
  a.explicit_head_dim = 24;  // not 64 / 4
  a.intermediate_size = 150;
  Transformer model(a);
  ExpectParametersAreTheShapes(model, a);
  const auto params = model->named_parameters();
  EXPECT_EQ(params.find("output.weight"), nullptr);
  EXPECT_EQ(params["layers.0.attention.wq.weight"].sizes().vec(), (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(params["layers.0.feed_forward.w1.weight"].sizes().vec(),
            (std::vector<int64_t>{150, 64}));
  EXPECT_EQ(model->Units().back().size(), 1u);  // the final norm; the head reuses unit 0

  // The logits are the embedding matrix applied to the final hidden state, and the embedding's
  // gradient collects both uses.
  torch::manual_seed(3);
  model->init_weights(3);
  const at::Tensor tokens = torch::randint(0, 301, {2, 8});
  BlockPositions positions;
  for (int64_t p = 0; p < 8; ++p) positions.positions.push_back(p);
  const at::Tensor logits = model->forward(tokens, positions);
  EXPECT_EQ(logits.sizes().vec(), (std::vector<int64_t>{2, 8, 301}));
  logits.sum().backward();
  const at::Tensor grad = params["tok_embeddings.weight"].grad();
  ASSERT_TRUE(grad.defined());
  // Rows of tokens never seen still get the output projection's gradient.
  const at::Tensor seen = torch::zeros({301}, torch::kBool).index_fill_(0, tokens.flatten(), true);
  const int64_t unseen = (~seen).nonzero().select(1, 0)[0].item<int64_t>();
  EXPECT_GT(grad[unseen].abs().sum().item<double>(), 0.0);
}

// Transformer::Loss with the fused blocks and the chunked loss (the defaults) against the ATen
// chains and F.cross_entropy on forward()'s logits: the same loss and parameter gradients to float
// rounding, tied embeddings included (the head's gradient reaches the one embedding weight).
TEST(TransformerTest, LossWithFusedBlocksAndChunkedLossMatchesTheChains) {
  const ModelArgs a = SmallTiedArgs();
  const at::Tensor tokens = torch::randint(0, 301, {2, 40});
  const at::Tensor labels = torch::randint(0, 301, {2, 40});
  BlockPositions positions;
  for (int64_t p = 0; p < 40; ++p) positions.positions.push_back(p);
  auto run = [&](bool fused) {
    Transformer model(a);
    model->init_weights(5);
    model->SetFusedBlocks(fused);
    model->SetChunkedLoss(fused);
    const at::Tensor loss = model->Loss(tokens, positions, labels);
    loss.backward();
    std::map<std::string, at::Tensor> grads;
    for (const auto& p : model->named_parameters()) grads[p.key()] = p.value().grad().clone();
    return std::make_pair(loss.item<double>(), grads);
  };
  const auto [fused_loss, fused_grads] = run(true);
  const auto [chain_loss, chain_grads] = run(false);
  EXPECT_NEAR(fused_loss, chain_loss, 1e-6 * std::fabs(chain_loss));
  ASSERT_EQ(fused_grads.size(), chain_grads.size());
  for (const auto& [name, g] : chain_grads) {
    const double scale = g.abs().max().item<double>();
    EXPECT_LE((fused_grads.at(name) - g).abs().max().item<double>(), 1e-5 * scale) << name;
  }
}

// Positions, not order, determine the rotation: rotating a permuted sequence at permuted positions
// gives the permuted result (what CP sharding relies on).
TEST(RopeTest, ShardedPositionsGiveTheSameRotation) {
  RotaryTables rope(16, 32, 500000.0);
  const auto x = torch::randn({1, 8, 4, 16});
  const auto full = rope.Apply(x, torch::arange(8));
  const auto idx = torch::tensor(std::vector<int64_t>{0, 1, 6, 7});
  const auto part = rope.Apply(x.index_select(1, idx), idx);
  EXPECT_TRUE(torch::equal(part, full.index_select(1, idx)));
}

}  // namespace
}  // namespace ringtrain
