// Tests for MFU's arithmetic (common/plan/model_flops.h): torchtitan's FLOPs per token against
// counts by hand, the peak table's matching of CUDA device names, and the percentage.
#include "common/plan/model_flops.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

ModelSection DebugModel() {
  absl::StatusOr<JobConfig> config = LoadJobConfig(testing::ConfigPath("debug_model.toml"), {});
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? config->model : ModelSection{};
}

TEST(ModelFlopsTest, DebugModelByHand) {
  // dim 128, 4 layers, 8 heads of 16 (4 kv), vocab 512, FFN 384. A block: wq, wo 128·128 each, wk,
  // wv 64·128 each, w1 w2 w3 3·384·128, two norms 2·128 = 196,864. Without the embedding: 4 blocks,
  // the final norm 128 and the output projection 512·128 = 853,120 parameters.
  const double matmul = 6.0 * 853'120;
  const double attention = 12.0 * 4 * 8 * 16 * 256;  // L · H · Dh · T, T = training.seq_len
  EXPECT_EQ(matmul + attention, 6'691'584.0);
  EXPECT_EQ(FlopsPerToken(DebugModel(), 256), 6'691'584.0);
  // Only the attention term grows with the sequence.
  EXPECT_EQ(FlopsPerToken(DebugModel(), 512) - FlopsPerToken(DebugModel(), 256), attention);
}

TEST(ModelFlopsTest, TheGpuCheckShapeMatchesItsPythonCount) {
  // tests/gpu/RESULTS.md row 24, computed by tests/gpu/run_checks.py: dim 2048, 16 layers, 16/8
  // heads, vocab 128256, seq 8192: N = 1,280,378,880, N_emb = 262,668,288, 9.327e+09.
  ModelSection m = DebugModel();
  m.dim = 2048;
  m.n_layers = 16;
  m.n_heads = 16;
  m.n_kv_heads = 8;
  m.vocab_size = 128256;
  m.multiple_of = 256;
  EXPECT_EQ(FlopsPerToken(m, 8192),
            6.0 * (1'280'378'880.0 - 262'668'288.0) + 12.0 * 16 * 16 * 128 * 8192);
  EXPECT_EQ(FlopsPerToken(m, 8192), 9'327'489'024.0);
}

TEST(ModelFlopsTest, TiedEmbeddingsStayInAndAnExplicitHeadDimCounts) {
  // The shape transformers counts 114,048 parameters for (tests/unit/memory_plan_test.cc): head_dim
  // 24 with dim 64 and 4 heads. Tied, the one embedding weight is the output matmul: all 114,048.
  ModelSection m;
  m.dim = 64;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.vocab_size = 301;
  m.head_dim = 24;
  m.intermediate_size = 150;
  m.tie_word_embeddings = true;
  EXPECT_EQ(FlopsPerToken(m, 16), 6.0 * 114'048 + 12.0 * 2 * 4 * 24 * 16);
  // Untied: one more V · C weight (the output), and the embedding's is left out: the same FLOPs.
  m.tie_word_embeddings = false;
  EXPECT_EQ(FlopsPerToken(m, 16), 6.0 * 114'048 + 12.0 * 2 * 4 * 24 * 16);
}

TEST(ModelFlopsTest, PeakTableMatchesCudaNamesVariantFirst) {
  const auto bf16 = MixedPrecision::kBFloat16;
  const auto fp32 = MixedPrecision::kFloat32;
  EXPECT_EQ(KnownPeakFlops("NVIDIA H100 80GB HBM3", bf16), 989e12);  // SXM
  EXPECT_EQ(KnownPeakFlops("NVIDIA H100 80GB HBM3", fp32), 67e12);
  EXPECT_EQ(KnownPeakFlops("NVIDIA H100 PCIe", bf16), 756e12);
  EXPECT_EQ(KnownPeakFlops("NVIDIA H100 NVL", bf16), 835e12);
  EXPECT_EQ(KnownPeakFlops("NVIDIA H200", bf16), 989e12);
  EXPECT_EQ(KnownPeakFlops("NVIDIA A100-SXM4-80GB", bf16), 312e12);
  EXPECT_EQ(KnownPeakFlops("NVIDIA A100-SXM4-80GB", fp32), 19.5e12);
  EXPECT_EQ(KnownPeakFlops("NVIDIA GB200", bf16), 2.5e15);       // not B200's row
  EXPECT_EQ(KnownPeakFlops("NVIDIA B200", fp32), std::nullopt);  // no float32 figure in the table
  EXPECT_EQ(KnownPeakFlops("NVIDIA GeForce RTX 4090", bf16), std::nullopt);
  EXPECT_EQ(KnownPeakFlops("cpu", fp32), std::nullopt);
}

TEST(ModelFlopsTest, MfuIsTheWorldsModelFlopsOverItsPeak) {
  // 10,000 tokens/s over 2 ranks of 100 GFLOP/s each: 6.691584e10 / 2e11.
  EXPECT_DOUBLE_EQ(MfuPercent(6'691'584.0, 10'000, 2, 1e11), 33.45792);
  EXPECT_DOUBLE_EQ(MfuPercent(6'691'584.0, 10'000, 1, 1e11), 2 * 33.45792);
}

}  // namespace
}  // namespace ringtrain
