// ringtrain's fused CPU attention kernel against plain softmax attention computed in float64
// (PyTorch autograd): forward and backward, GQA, ragged tiles, head-tail shard positions, key
// positions in no order, rows that see no key; its exp against std::exp; the same result twice
// (bitwise) and on 1 and 2 threads; and the kernel inside ring attention. The row code is tested at
// every level this CPU has (cpu_isa.h), forced in turn.
#include "worker/engine/kernels/fused_cpu_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "tests/unit/reference_attention.h"
#include "tests/unit/tensor_compare.h"
#include "worker/engine/kernels/attention_rows.h"
#include "worker/engine/kernels/cpu_isa.h"
#include "worker/engine/parallel/mesh.h"

namespace ringtrain {
namespace {

std::vector<int64_t> Iota(int64_t n, int64_t from = 0) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), from);
  return p;
}

struct Result {
  at::Tensor out, lse, dq, dk, dv;
};

// The fused kernel on one block: forward, then backward with this block as the whole attention.
Result RunFused(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const at::Tensor& dout, const std::vector<int64_t>& qp,
                const std::vector<int64_t>& kp, double scale, FusedCpuTiling tiling) {
  const BlockPositions q_pos{qp}, k_pos{kp};
  const BlockOutput fwd = FusedCpuAttentionForward(q, k, v, q_pos, k_pos, scale, tiling);
  const at::Tensor delta = AttentionDelta(dout, fwd.out);
  const BlockGrads g =
      FusedCpuAttentionBackward(q, k, v, dout, delta, fwd.lse, q_pos, k_pos, scale, tiling);
  return {fwd.out, fwd.lse, g.dq, g.dk, g.dv};
}

// Plain attention in float64; rows that see no key give 0 (and no gradient).
Result RunReference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& dout, const std::vector<int64_t>& qp,
                    const std::vector<int64_t>& kp, double scale) {
  auto q64 = q.to(torch::kFloat64).requires_grad_(), k64 = k.to(torch::kFloat64).requires_grad_(),
       v64 = v.to(torch::kFloat64).requires_grad_();
  const int64_t group = q.size(1) / k.size(1);
  auto scores = torch::matmul(q64, k64.repeat_interleave(group, 1).transpose(-1, -2)) * scale;
  const auto hidden = torch::tensor(kp).view({1, -1}) > torch::tensor(qp).view({-1, 1});
  scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
  const auto lse = torch::logsumexp(scores, -1);
  const auto seen = torch::isfinite(lse).unsqueeze(-1);
  const auto probs =
      torch::where(seen,
                   torch::exp(scores - torch::where(seen, lse.unsqueeze(-1),
                                                    torch::zeros_like(lse.unsqueeze(-1)))),
                   torch::zeros_like(scores));
  const auto out = torch::matmul(probs, v64.repeat_interleave(group, 1));
  const auto g = torch::autograd::grad({out}, {q64, k64, v64}, {dout.to(torch::kFloat64)});
  return {out.detach(), lse.detach(), g[0], g[1], g[2]};
}

struct Case {
  const char* name;
  int64_t batch, heads, kv_heads, lq, lk, dim;
  FusedCpuTiling tiling;
  enum Layout { kSame, kHeadTail, kShuffledKeys, kLaterKeys } layout;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class FusedCpuAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(FusedCpuAttentionTest, MatchesPlainAttentionInFloat64) {
  const Case c = GetParam();
  torch::manual_seed(7);
  const auto q = torch::randn({c.batch, c.heads, c.lq, c.dim});
  const auto k = torch::randn({c.batch, c.kv_heads, c.lk, c.dim});
  const auto v = torch::randn({c.batch, c.kv_heads, c.lk, c.dim});
  const auto dout = torch::randn({c.batch, c.heads, c.lq, c.dim});
  std::vector<int64_t> qp = Iota(c.lq), kp = Iota(c.lk);
  switch (c.layout) {
    case Case::kSame: break;
    case Case::kHeadTail:  // queries: rank 1's shard of 4; keys: rank 0's
      qp = ShardPositions(2 * c.lq, 2, 1, LoadBalancer::kHeadTail);
      kp = ShardPositions(2 * c.lk, 2, 0, LoadBalancer::kHeadTail);
      break;
    case Case::kShuffledKeys: {
      std::mt19937 rng(3);
      std::shuffle(kp.begin(), kp.end(), rng);
      break;
    }
    case Case::kLaterKeys:  // the first queries see nothing
      kp = Iota(c.lk, 10);
      break;
  }
  const double scale = 1.0 / std::sqrt(double(c.dim));
  const Result want = RunReference(q, k, v, dout, qp, kp, scale);
  for (CpuIsa isa : AvailableCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    ScopedCpuIsa level(isa);
    const Result got = RunFused(q, k, v, dout, qp, kp, scale, c.tiling);
    const double tol = 2e-5;
    EXPECT_LE(MaxDiff(got.out, want.out), tol);
    EXPECT_LE(MaxDiff(got.dq, want.dq), tol);
    EXPECT_LE(MaxDiff(got.dk, want.dk), tol);
    EXPECT_LE(MaxDiff(got.dv, want.dv), tol);
    const auto finite = torch::isfinite(want.lse);
    EXPECT_TRUE(torch::equal(torch::isfinite(got.lse), finite));
    EXPECT_LE(MaxDiff(got.lse.masked_select(finite), want.lse.masked_select(finite)), tol);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedCpuAttentionTest,
    ::testing::Values(Case{"mha_auto_tiles", 2, 4, 4, 96, 96, 32, {}, Case::kSame},
                      Case{"gqa_ragged_tiles", 1, 6, 2, 100, 100, 16, {24, 40}, Case::kSame},
                      Case{"gqa_dim64_rectangular", 2, 4, 1, 40, 72, 64, {16, 32}, Case::kSame},
                      Case{"dim128_auto", 1, 2, 2, 150, 150, 128, {}, Case::kSame},
                      Case{"headtail_shards", 1, 4, 2, 64, 64, 32, {16, 16}, Case::kHeadTail},
                      Case{"shuffled_keys", 1, 4, 2, 50, 50, 8, {16, 16}, Case::kShuffledKeys},
                      Case{"rows_that_see_nothing", 1, 2, 1, 40, 30, 16, {8, 8}, Case::kLaterKeys},
                      Case{"odd_dim_and_lengths", 1, 3, 1, 33, 17, 7, {5, 3}, Case::kSame}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(FusedCpuAttention, SameResultTwiceAndOnOneOrTwoThreads) {
  torch::manual_seed(5);
  const auto q = torch::randn({1, 8, 300, 32}), k = torch::randn({1, 4, 300, 32}),
             v = torch::randn({1, 4, 300, 32}), dout = torch::randn({1, 8, 300, 32});
  const int saved = at::get_num_threads();
  at::set_num_threads(2);
  const Result a = RunFused(q, k, v, dout, Iota(300), Iota(300), 0.2, {32, 64});
  const Result b = RunFused(q, k, v, dout, Iota(300), Iota(300), 0.2, {32, 64});
  at::set_num_threads(1);
  const Result one = RunFused(q, k, v, dout, Iota(300), Iota(300), 0.2, {32, 64});
  at::set_num_threads(saved);
  for (const auto& [x, y] :
       {std::pair{a.out, b.out}, {a.lse, b.lse}, {a.dq, b.dq}, {a.dk, b.dk}, {a.dv, b.dv}}) {
    EXPECT_TRUE(torch::equal(x, y));
  }
  // Rows never cross threads, so out, lse and dQ do not depend on the thread count; dK/dV are
  // summed over per-thread parts.
  EXPECT_TRUE(torch::equal(a.out, one.out));
  EXPECT_TRUE(torch::equal(a.lse, one.lse));
  EXPECT_TRUE(torch::equal(a.dq, one.dq));
  EXPECT_LE(MaxDiff(a.dk, one.dk), 1e-5);
  EXPECT_LE(MaxDiff(a.dv, one.dv), 1e-5);
}

TEST(FusedCpuAttention, CountsTheScoresOfTilesItComputes) {
  // 4 query tiles × 4 key tiles of 16, causal: the 10 tiles on and below the diagonal.
  const auto q = torch::randn({1, 2, 64, 8}), k = torch::randn({1, 1, 64, 8});
  const BlockOutput out =
      FusedCpuAttentionForward(q, k, k, {Iota(64)}, {Iota(64)}, 0.3, FusedCpuTiling{16, 16});
  EXPECT_EQ(out.scores_computed, 10 * 2 * 16 * 16);
}

TEST(FusedCpuAttention, WidensBFloat16AndKeepsFloat64OnTheTiledKernel) {
  torch::manual_seed(9);
  const auto q = torch::randn({1, 2, 24, 16}), k = torch::randn({1, 2, 24, 16});
  FusedCpuBlockKernel kernel;
  const BlockPositions pos{Iota(24)};
  const BlockOutput f32 = kernel.Forward(q, k, k, pos, pos, 0.25);
  const BlockOutput bf16 = kernel.Forward(q.to(torch::kBFloat16), k.to(torch::kBFloat16),
                                          k.to(torch::kBFloat16), pos, pos, 0.25);
  EXPECT_EQ(bf16.out.scalar_type(), torch::kFloat);
  EXPECT_LE(MaxDiff(bf16.out, f32.out), 5e-2);
  const BlockOutput f64 = kernel.Forward(q.to(torch::kFloat64), k.to(torch::kFloat64),
                                         k.to(torch::kFloat64), pos, pos, 0.25);
  EXPECT_EQ(f64.out.scalar_type(), torch::kFloat64);
  EXPECT_LE(MaxDiff(f64.out, f32.out), 1e-5);
}

TEST(AttentionRows, ExpMatchesStdExpAndNeverMakesDenormals) {
  std::vector<float> x;
  for (float t = -100.0f; t <= 88.0f; t += 0.0137f) x.push_back(t);
  x.push_back(-std::numeric_limits<float>::infinity());
  for (CpuIsa isa : AvailableCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    ScopedCpuIsa level(isa);
    std::vector<float> y(x.size());
    VecExp(x.data(), y.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = std::exp(x[i]);
      if (x[i] < -87.0f) {
        EXPECT_EQ(y[i], 0.0f) << "x = " << x[i];
      } else {
        EXPECT_NEAR(y[i], want, 3e-7 * want) << "x = " << x[i];
        EXPECT_EQ(std::fpclassify(y[i]), FP_NORMAL) << "x = " << x[i];
      }
    }
  }
}

TEST(AttentionRows, SoftmaxStepMatchesTwoPassSoftmax) {
  // Two tiles of one row, the second only partly visible, against exp(s − max) / Σ over all.
  for (CpuIsa isa : AvailableCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    ScopedCpuIsa level(isa);
    std::vector<float> s1 = {0.5f, -1.0f, 3.0f, 2.0f,  0.0f, 1.0f, -2.0f, 4.0f, 0.25f,
                             1.0f, 2.0f,  0.5f, -0.5f, 3.5f, 2.5f, 1.5f,  0.75f};
    std::vector<float> s2 = {5.0f, 1.5f, 9.0f};  // the last entry is masked
    float max = -std::numeric_limits<float>::infinity(), sum = 0.0f;
    std::vector<float> acc(3, 0.0f);
    SoftmaxRowStep(s1.data(), 17, 17, &max, &sum, acc.data(), 3);
    acc = {1.0f, 2.0f, 3.0f};  // stands for P·V so far: must be rescaled by the next step
    SoftmaxRowStep(s2.data(), 3, 2, &max, &sum, acc.data(), 3);
    EXPECT_FLOAT_EQ(max, 5.0f);
    EXPECT_EQ(s2[2], 0.0f);
    double want_sum = 0;
    for (float v : {0.5f, -1.0f, 3.0f, 2.0f, 0.0f, 1.0f, -2.0f, 4.0f, 0.25f, 1.0f, 2.0f, 0.5f,
                    -0.5f, 3.5f, 2.5f, 1.5f, 0.75f, 5.0f, 1.5f}) {
      want_sum += std::exp(double(v) - 5.0);
    }
    EXPECT_NEAR(sum, want_sum, 1e-6);
    EXPECT_NEAR(acc[1], 2.0 * std::exp(4.0 - 5.0), 1e-6);
  }
}

}  // namespace
}  // namespace ringtrain
