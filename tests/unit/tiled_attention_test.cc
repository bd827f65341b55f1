// Tiled attention against plain softmax attention (the full L × L matrix, PyTorch autograd).
#include "worker/engine/kernels/tiled_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <numeric>

#include "tests/unit/reference_attention.h"
#include "worker/engine/model/attention_plan.h"

namespace ringtrain {
namespace {

std::vector<int64_t> Iota(int64_t n, int64_t start = 0) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

struct Case {
  int64_t heads, kv_heads, length, dim, q_tile, kv_tile;
};

class TiledAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(TiledAttentionTest, CausalForwardAndGradientsMatchPlainAttention) {
  const Case c = GetParam();
  torch::manual_seed(7);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto q = torch::randn({2, c.heads, c.length, c.dim}, opts).requires_grad_();
  auto k = torch::randn({2, c.kv_heads, c.length, c.dim}, opts).requires_grad_();
  auto v = torch::randn({2, c.kv_heads, c.length, c.dim}, opts).requires_grad_();
  const auto dout = torch::randn({2, c.heads, c.length, c.dim}, opts);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.dim));
  const BlockPositions pos{Iota(c.length)};

  const auto expected = ReferenceAttention(q, k, v, pos.positions, pos.positions, true, scale);
  const auto grads_expected = torch::autograd::grad({expected}, {q, k, v}, {dout});
  const auto actual = LocalCausalAttention(q, k, v, pos, scale, {c.q_tile, c.kv_tile});
  const auto grads_actual = torch::autograd::grad({actual}, {q, k, v}, {dout});

  EXPECT_TRUE(torch::allclose(actual, expected, 0, 1e-12));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(torch::allclose(grads_actual[i], grads_expected[i], 0, 1e-11)) << "grad " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiles, TiledAttentionTest,
                         ::testing::Values(Case{4, 4, 64, 8, 64, 64}, Case{4, 4, 64, 8, 16, 16},
                                           Case{4, 2, 64, 8, 16, 32}, Case{6, 2, 50, 8, 7, 13},
                                           Case{4, 1, 33, 16, 8, 5}, Case{2, 2, 17, 4, 1, 3}));

// Blocks of arbitrary (non-contiguous, head-tail-like) positions, merged by log-sum-exp, and
// their backward from the merged statistics: the sum of the block gradients is the full gradient.
TEST(TiledAttentionBlocks, MergedBlocksEqualFullAttention) {
  torch::manual_seed(11);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t heads = 4, kv_heads = 2, chunk = 8, dim = 8;
  // Four chunks of a 32-token sequence; the queries hold chunks 0 and 3 (head-tail for cp = 2).
  const std::vector<std::vector<int64_t>> key_blocks = {Iota(2 * chunk, 0), Iota(2 * chunk, 16)};
  std::vector<int64_t> q_positions = Iota(chunk, 0);
  for (int64_t p : Iota(chunk, 3 * chunk)) q_positions.push_back(p);
  const auto q = torch::randn({1, heads, 2 * chunk, dim}, opts);
  const auto k_full = torch::randn({1, kv_heads, 4 * chunk, dim}, opts).requires_grad_();
  const auto v_full = torch::randn({1, kv_heads, 4 * chunk, dim}, opts).requires_grad_();
  const auto qg = q.clone().requires_grad_();
  const double scale = 0.3;
  const auto dout = torch::randn({1, heads, 2 * chunk, dim}, opts);

  const auto expected =
      ReferenceAttention(qg, k_full, v_full, q_positions, Iota(4 * chunk), true, scale);
  const auto g = torch::autograd::grad({expected}, {qg, k_full, v_full}, {dout});

  auto out = torch::zeros({1, heads, 2 * chunk, dim}, opts);
  auto lse = torch::full({1, heads, 2 * chunk}, -INFINITY, opts);
  const BlockPositions qp{q_positions};
  for (int b = 0; b < 2; ++b) {
    const auto kb = k_full.detach().narrow(2, b * 2 * chunk, 2 * chunk).contiguous();
    const auto vb = v_full.detach().narrow(2, b * 2 * chunk, 2 * chunk).contiguous();
    MergeBlockInto(
        out, lse,
        AttentionBlockForward(q, kb, vb, qp, {key_blocks[b]}, MaskKind::kCausal, scale, {5, 3}));
  }
  EXPECT_TRUE(torch::allclose(out, expected, 0, 1e-12));

  const auto delta = AttentionDelta(dout, out);
  auto dq = torch::zeros_like(q);
  for (int b = 0; b < 2; ++b) {
    const auto kb = k_full.detach().narrow(2, b * 2 * chunk, 2 * chunk).contiguous();
    const auto vb = v_full.detach().narrow(2, b * 2 * chunk, 2 * chunk).contiguous();
    const BlockGrads bg = AttentionBlockBackward(q, kb, vb, dout, delta, lse, qp, {key_blocks[b]},
                                                 MaskKind::kCausal, scale, {4, 4});
    dq += bg.dq;
    EXPECT_TRUE(torch::allclose(bg.dk, g[1].narrow(2, b * 2 * chunk, 2 * chunk), 0, 1e-11));
    EXPECT_TRUE(torch::allclose(bg.dv, g[2].narrow(2, b * 2 * chunk, 2 * chunk), 0, 1e-11));
  }
  EXPECT_TRUE(torch::allclose(dq, g[0], 0, 1e-11));
}

TEST(TiledAttentionBlocks, FullyHiddenBlockContributesNothing) {
  const auto q = torch::randn({1, 2, 4, 4});
  const auto k = torch::randn({1, 2, 4, 4});
  const BlockOutput r =
      AttentionBlockForward(q, k, k, {Iota(4, 0)}, {Iota(4, 10)}, MaskKind::kCausal, 0.5, {2, 2});
  EXPECT_TRUE(torch::all(r.out == 0).item<bool>());
  EXPECT_TRUE(torch::all(torch::isinf(r.lse)).item<bool>());
  auto out = torch::zeros_like(q);
  auto lse = torch::full({1, 2, 4}, -INFINITY);
  MergeBlockInto(out, lse, r);
  EXPECT_FALSE(torch::any(torch::isnan(out)).item<bool>());
}

// The CPU's one-pass merge (float32) against the ATen chain in float64: rows empty on either side,
// both or neither, a NaN and a +inf kept as the chain keeps them; the same bits on one thread or
// two (601 rows: three pieces of the merge's grain).
TEST(TiledAttentionBlocks, CpuMergeMatchesTheAtenChain) {
  torch::manual_seed(5);
  const int64_t rows = 601, dim = 19;
  auto lse = torch::randn({1, 1, rows}) * 4;
  auto block_lse = torch::randn({1, 1, rows}) * 4;
  const auto out = torch::randn({1, 1, rows, dim});
  auto block_out = torch::randn({1, 1, rows, dim});
  for (int64_t r : {0, 1, 7, 500}) lse[0][0][r] = -INFINITY;        // the running side empty
  for (int64_t r : {1, 2, 9, 501}) block_lse[0][0][r] = -INFINITY;  // the block empty (1: both)
  for (int64_t r : {1, 2, 9, 501}) block_out[0][0][r].zero_();
  for (int64_t r : {0, 1, 7, 500}) out[0][0][r].zero_();
  block_lse[0][0][3] = NAN;
  lse[0][0][4] = INFINITY;
  block_lse[0][0][4] = INFINITY;

  auto expected_out = out.to(torch::kDouble);
  auto expected_lse = lse.to(torch::kDouble);
  MergeBlockInto(expected_out, expected_lse,
                 BlockOutput{block_out.to(torch::kDouble), block_lse.to(torch::kDouble)});
  ASSERT_TRUE(torch::isnan(expected_lse[0][0][3]).item<bool>());
  std::vector<at::Tensor> results;
  const int threads_before = at::get_num_threads();
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    at::Tensor merged_out = out.clone(), merged_lse = lse.clone();
    MergeBlockInto(merged_out, merged_lse, BlockOutput{block_out, block_lse});
    EXPECT_TRUE(torch::allclose(merged_out.to(torch::kDouble), expected_out, 1e-6, 1e-6,
                                /*equal_nan=*/true));
    EXPECT_TRUE(torch::allclose(merged_lse.to(torch::kDouble), expected_lse, 1e-6, 1e-6,
                                /*equal_nan=*/true));
    EXPECT_TRUE(torch::all(merged_out[0][0][1] == 0).item<bool>());
    EXPECT_TRUE(std::isinf(merged_lse[0][0][1].item<float>()));
    results.push_back(merged_out);
  }
  at::set_num_threads(threads_before);
  EXPECT_TRUE(torch::equal(results[0].nan_to_num(), results[1].nan_to_num()));
}

TEST(TiledAttentionBlocks, UnmaskedBlockMatchesPlainAttentionInFloat32) {
  torch::manual_seed(3);
  const auto q = torch::randn({2, 8, 40, 16});
  const auto k = torch::randn({2, 2, 24, 16});
  const auto v = torch::randn({2, 2, 24, 16});
  const auto expected = ReferenceAttention(q, k, v, Iota(40), Iota(24), false, 0.25);
  const auto r =
      AttentionBlockForward(q, k, v, {Iota(40)}, {Iota(24)}, MaskKind::kNone, 0.25, {16, 8});
  EXPECT_TRUE(torch::allclose(r.out, expected, 0, 1e-5));
}

}  // namespace
}  // namespace ringtrain
