// Hugging Face names and RoPE layout ⇄ ours: the permutation of wq / wk rows turns our
// interleaved-pair rotation into transformers' rotate-half one (checked by rotating both ways),
// the renaming round-trips, and a file that does not fit the model is refused naming each tensor;
// a folder read range by range (OpenHfStateReader) gives what the whole import gives.
#include "worker/engine/hf/hf_adapter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/integration/test_util.h"
#include "worker/engine/hf/hf_folder.h"
#include "worker/engine/model/rope.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

ModelArgs SmallArgs(bool tied) {
  ModelArgs a;
  a.dim = 32;
  a.n_layers = 2;
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.vocab_size = 50;
  a.explicit_head_dim = 12;
  a.intermediate_size = 40;
  a.tie_word_embeddings = tied;
  a.max_seq_len = 16;
  return a;
}

StateDict RandomWeights(const ModelArgs& a) {
  StateDict dict;
  for (const auto& [name, shape] : ParameterShapes(a)) dict.emplace_back(name, torch::randn(shape));
  return dict;
}

// transformers' apply_rotary_pos_emb for one position: x·cos + rotate_half(x)·sin, with the
// angles of frequency i in both halves.
at::Tensor RotateHalf(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * torch::cat({cos, cos}, -1) + rotated * torch::cat({sin, sin}, -1);
}

TEST(HfAdapterTest, PermutedRowsTurnInterleavedRopeIntoRotateHalf) {
  const int64_t heads = 3, head_dim = 8, in = 5;
  RotaryTables rope(head_dim, 16, 10000.0);
  torch::manual_seed(0);
  const at::Tensor w = torch::randn({heads * head_dim, in});  // ours
  const at::Tensor x = torch::randn({1, 1, in});
  const int64_t position = 7;
  // Ours: project, rotate interleaved pairs.
  const at::Tensor q = at::linear(x, w).view({1, 1, heads, head_dim});
  const at::Tensor ours = rope.Apply(q, torch::tensor(std::vector<int64_t>{position}));
  // transformers': project with the permuted rows, rotate halves.
  const at::Tensor hf_w = PermuteRowsToHf(w, heads, head_dim);
  const at::Tensor hf_q = at::linear(x, hf_w).view({heads, head_dim});
  const at::Tensor theirs = RotateHalf(hf_q, rope.cos()[position], rope.sin()[position]);
  // The same vectors, in the other layout.
  const at::Tensor ours_as_hf =
      PermuteRowsToHf(ours.reshape({heads * head_dim, 1}), heads, head_dim).view({heads, head_dim});
  EXPECT_TRUE(torch::allclose(ours_as_hf, theirs, 1e-6, 1e-6));
  EXPECT_TRUE(torch::equal(PermuteRowsFromHf(hf_w, heads, head_dim), w));
}

TEST(HfAdapterTest, RenamingRoundTripsAndTiedFilesMayCarryTheHead) {
  for (bool tied : {false, true}) {
    const ModelArgs a = SmallArgs(tied);
    const StateDict ours = RandomWeights(a);
    StateDict hf = ToHfStateDict(ours, a);
    ASSERT_EQ(hf.size(), ours.size());
    EXPECT_EQ(hf[0].first, "model.embed_tokens.weight");
    EXPECT_EQ(hf[1].first, "model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(hf[5].first, "model.layers.0.mlp.gate_proj.weight");
    EXPECT_EQ(hf[6].first, "model.layers.0.mlp.down_proj.weight");
    EXPECT_EQ(hf[8].first, "model.layers.0.input_layernorm.weight");
    EXPECT_EQ(hf.back().first, tied ? "model.norm.weight" : "lm_head.weight");
    if (tied) hf.emplace_back("lm_head.weight", ours[0].second);  // some exports carry it
    hf.emplace_back("model.rotary_emb.inv_freq", torch::ones({6}));
    const absl::StatusOr<StateDict> back = FromHfStateDict(hf, a, "dir");
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(back->size(), ours.size());
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_EQ((*back)[i].first, ours[i].first);
      EXPECT_TRUE(torch::equal((*back)[i].second, ours[i].second)) << ours[i].first;
    }
  }
}

TEST(HfAdapterTest, RefusesMissingUnexpectedAndMisShapedTensorsNamingEach) {
  const ModelArgs a = SmallArgs(false);
  StateDict hf = ToHfStateDict(RandomWeights(a), a);
  hf.erase(hf.begin() + 4);              // layers.0 o_proj
  hf[1].second = torch::zeros({7, 32});  // q_proj
  hf.emplace_back("model.layers.0.self_attn.q_proj.bias", torch::zeros({48}));
  const absl::StatusOr<StateDict> back = FromHfStateDict(hf, a, "/models/x");
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(back.status().message());
  EXPECT_THAT(message, HasSubstr("/models/x"));
  EXPECT_THAT(message, HasSubstr("missing: model.layers.0.self_attn.o_proj.weight"));
  EXPECT_THAT(message, HasSubstr("unexpected: model.layers.0.self_attn.q_proj.bias"));
  EXPECT_THAT(
      message,
      HasSubstr("model.layers.0.self_attn.q_proj.weight (7, 32) where the model has (48, 32)"));
}

}  // namespace
}  // namespace ringtrain

namespace ringtrain {
namespace {

// A Hugging Face folder read through OpenHfStateReader: any element range of any tensor (wq / wk
// across RoPE-permuted rows, bfloat16 shards converted) equals the same range of the whole state
// dict FromHfStateDict makes, and only that range's bytes are read.
TEST(HfStateReaderTest, ReadsAnyRangeAsTheWholeImportWouldReadingOnlyItsBytes) {
  testing::TempDir dir;
  const ModelArgs args = SmallArgs(/*tied=*/false);
  torch::manual_seed(3);
  HfExportOptions options;
  options.dtype = MixedPrecision::kBFloat16;
  options.max_shard_bytes = 4000;  // several shards
  ASSERT_TRUE(WriteHfFolder(dir / "hf", ToHfStateDict(RandomWeights(args), args), options).ok());
  absl::StatusOr<StateDict> hf = ReadHfWeights(dir / "hf");
  ASSERT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<StateDict> whole = FromHfStateDict(*hf, args, "hf");
  ASSERT_TRUE(whole.ok()) << whole.status();
  absl::StatusOr<std::unique_ptr<StateReader>> reader = OpenHfStateReader(dir / "hf", args);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE(CheckStateMatches(**reader, "", ParameterShapes(args)).ok());
  for (const auto& [name, tensor] : *whole) {
    const at::Tensor flat = tensor.to(at::kFloat).reshape(-1);
    const int64_t n = flat.numel();
    for (const auto& [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
             {0, n}, {n / 3, n / 3 + 7}, {5, n - 5}, {n - 1, n}}) {
      if (begin >= end) continue;
      at::Tensor out = at::empty({end - begin});
      const uint64_t before = (*reader)->bytes_read();
      ASSERT_TRUE((*reader)->Read(name, begin, end, out).ok()) << name;
      EXPECT_TRUE(torch::equal(out, flat.narrow(0, begin, end - begin))) << name << " " << begin;
      EXPECT_EQ((*reader)->bytes_read() - before, uint64_t(end - begin) * 2) << name;
    }
  }
  // A folder that does not fit the model is refused as the whole import refuses it.
  ModelArgs other = args;
  other.vocab_size = 51;
  const auto refused = OpenHfStateReader(dir / "hf", other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("model.embed_tokens.weight"));
}

}  // namespace
}  // namespace ringtrain
