// ringtrain's fused CPU attention kernel against plain softmax attention computed in float64
// (PyTorch autograd): forward and backward, GQA, ragged tiles, head-tail shard positions, key
// positions in no order, rows that see no key; its exp against std::exp; the same result twice
// (bitwise) and on 1 and 2 threads; bfloat16 inputs multiplied as bfloat16 or widened; and the
// kernel inside ring attention. The row code is tested at every level this CPU has (cpu_isa.h),
// forced in turn, and the float32 GEMMs with every engine it has (MKL, and BRGeMM with AVX-512).
#include "worker/engine/kernels/fused_cpu_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

// Every CPU level with the active float32 GEMM engine, and the other engines at the widest level.
std::vector<std::pair<CpuIsa, F32Gemm>> IsasAndGemms() {
  std::vector<std::pair<CpuIsa, F32Gemm>> runs;
  for (CpuIsa isa : AvailableCpuIsas()) runs.emplace_back(isa, ActiveF32Gemm());
  for (F32Gemm gemm : AvailableF32Gemms()) {
    if (gemm != ActiveF32Gemm()) runs.emplace_back(DetectedCpuIsa(), gemm);
  }
  return runs;
}

struct Result {
  at::Tensor out, lse, dq, dk, dv;
};

// The fused kernel on one block: forward, then backward with this block as the whole attention.
Result RunFused(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const at::Tensor& dout, const std::vector<int64_t>& qp,
                const std::vector<int64_t>& kp, double scale, FusedCpuTiling tiling,
                F32Gemm f32_gemm = ActiveF32Gemm()) {
  const BlockPositions q_pos{qp}, k_pos{kp};
  const BlockOutput fwd = FusedCpuAttentionForward(q, k, v, q_pos, k_pos, scale, tiling, f32_gemm);
  const at::Tensor delta = AttentionDelta(dout.to(torch::kFloat), fwd.out);
  const BlockGrads g = FusedCpuAttentionBackward(q, k, v, dout, delta, fwd.lse, q_pos, k_pos, scale,
                                                 tiling, f32_gemm);
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
  for (const auto& [isa, gemm] : IsasAndGemms()) {
    SCOPED_TRACE(std::string(CpuIsaName(isa)) + ", float32 GEMMs " + F32GemmName(gemm));
    ScopedCpuIsa level(isa);
    const Result got = RunFused(q, k, v, dout, qp, kp, scale, c.tiling, gemm);
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
  for (F32Gemm gemm : AvailableF32Gemms()) {
    SCOPED_TRACE(F32GemmName(gemm));
    const int saved = at::get_num_threads();
    at::set_num_threads(2);
    const Result a = RunFused(q, k, v, dout, Iota(300), Iota(300), 0.2, {32, 64}, gemm);
    const Result b = RunFused(q, k, v, dout, Iota(300), Iota(300), 0.2, {32, 64}, gemm);
    at::set_num_threads(1);
    const Result one = RunFused(q, k, v, dout, Iota(300), Iota(300), 0.2, {32, 64}, gemm);
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
}

// The float32 GEMM engines: each is the one asked for (the kernel says which), and they agree to
// float32 rounding (the float64 comparisons above bound each) without being one engine twice.
TEST(FusedCpuAttention, EachFloat32GemmEngineRunsAsChosen) {
  const std::vector<F32Gemm> gemms = AvailableF32Gemms();
  ASSERT_EQ(gemms.front(), F32Gemm::kMkl);
  EXPECT_EQ(gemms.size() > 1, int(DetectedCpuIsa()) >= int(CpuIsa::kAvx512));
  torch::manual_seed(6);
  const auto q = torch::randn({1, 4, 200, 32}), k = torch::randn({1, 2, 200, 32}),
             v = torch::randn({1, 2, 200, 32}), dout = torch::randn({1, 4, 200, 32});
  const Result mkl = RunFused(q, k, v, dout, Iota(200), Iota(200), 0.2, {}, F32Gemm::kMkl);
  for (F32Gemm gemm : gemms) {
    SCOPED_TRACE(F32GemmName(gemm));
    const FusedCpuBlockKernel kernel({}, Bf16Gemm::kWiden, gemm);
    EXPECT_NE(kernel.Describe().find(std::string("float32 GEMMs ") + F32GemmName(gemm)),
              std::string::npos)
        << kernel.Describe();
    const Result got = RunFused(q, k, v, dout, Iota(200), Iota(200), 0.2, {}, gemm);
    for (const auto& [x, y] :
         {std::pair{got.out, mkl.out}, {got.dq, mkl.dq}, {got.dk, mkl.dk}, {got.dv, mkl.dv}}) {
      EXPECT_LE(RelDiff(x, y), 1e-5);
    }
    // BRGeMM sums a tile's products in another order than MKL: some bits differ.
    if (gemm != F32Gemm::kMkl) EXPECT_FALSE(torch::equal(got.dk, mkl.dk));
  }
}

TEST(FusedCpuAttention, CountsTheScoresOfTilesItComputes) {
  // 4 query tiles × 4 key tiles of 16, causal: the 10 tiles on and below the diagonal.
  const auto q = torch::randn({1, 2, 64, 8}), k = torch::randn({1, 1, 64, 8});
  const BlockOutput out =
      FusedCpuAttentionForward(q, k, k, {Iota(64)}, {Iota(64)}, 0.3, FusedCpuTiling{16, 16});
  EXPECT_EQ(out.scores_computed, 10 * 2 * 16 * 16);
}

// bfloat16 inputs multiplied as bfloat16 (the native path: P and dS rounded to bfloat16, float32
// accumulation) against float64 attention of the same bfloat16 values, beside the widened path;
// at every CPU level (the rounding row follows it); bitwise repeatable, and out, lse and dQ
// independent of the thread count.
TEST(FusedCpuAttention, BFloat16NativeGemmsMatchFloat64WithinBFloat16Rounding) {
  struct Bf16Case {
    const char* name;
    int64_t heads, kv_heads, len, dim;
    FusedCpuTiling tiling;
  };
  for (const Bf16Case& c : {Bf16Case{"gqa_ragged_tiles", 6, 2, 100, 16, {24, 40}},
                            Bf16Case{"mha_auto_tiles", 4, 4, 150, 32, {}},
                            Bf16Case{"dim64_odd_length", 4, 2, 77, 64, {16, 32}}}) {
    SCOPED_TRACE(c.name);
    torch::manual_seed(11);
    const auto q = torch::randn({2, c.heads, c.len, c.dim}).to(torch::kBFloat16);
    const auto k = torch::randn({2, c.kv_heads, c.len, c.dim}).to(torch::kBFloat16);
    const auto v = torch::randn({2, c.kv_heads, c.len, c.dim}).to(torch::kBFloat16);
    const auto dout = torch::randn({2, c.heads, c.len, c.dim}).to(torch::kBFloat16);
    const std::vector<int64_t> pos = Iota(c.len);
    const double scale = 1.0 / std::sqrt(double(c.dim));
    const Result want = RunReference(q, k, v, dout, pos, pos, scale);
    const Result widened = RunFused(q.to(torch::kFloat), k.to(torch::kFloat), v.to(torch::kFloat),
                                    dout.to(torch::kFloat), pos, pos, scale, c.tiling);
    for (CpuIsa isa : AvailableCpuIsas()) {
      SCOPED_TRACE(CpuIsaName(isa));
      ScopedCpuIsa level(isa);
      const Result got = RunFused(q, k, v, dout, pos, pos, scale, c.tiling);
      for (const at::Tensor& t : {got.out, got.lse, got.dq, got.dk, got.dv}) {
        EXPECT_EQ(t.scalar_type(), torch::kFloat);
      }
      // Relative to each tensor's largest entry: bfloat16 keeps 8 bits (2^-9 relative rounding)
      // and P and dS are rounded once each. Widened, the same inputs give float32 accuracy.
      EXPECT_LE(RelDiff(got.out, want.out), 1e-2);
      EXPECT_LE(RelDiff(got.lse, want.lse), 1e-5);
      EXPECT_LE(RelDiff(got.dq, want.dq), 2e-2);
      EXPECT_LE(RelDiff(got.dk, want.dk), 2e-2);
      EXPECT_LE(RelDiff(got.dv, want.dv), 1e-2);
      EXPECT_LE(RelDiff(widened.out, want.out), 1e-5);
      EXPECT_LE(RelDiff(widened.dq, want.dq), 1e-5);
      // The native path really rounds (it is not the widened one under another name).
      EXPECT_FALSE(torch::equal(got.dv, widened.dv));
      const Result again = RunFused(q, k, v, dout, pos, pos, scale, c.tiling);
      for (const auto& [x, y] : {std::pair{got.out, again.out},
                                 {got.lse, again.lse},
                                 {got.dq, again.dq},
                                 {got.dk, again.dk},
                                 {got.dv, again.dv}}) {
        EXPECT_TRUE(torch::equal(x, y));
      }
    }
    const int saved = at::get_num_threads();
    at::set_num_threads(1);
    const Result one = RunFused(q, k, v, dout, pos, pos, scale, c.tiling);
    at::set_num_threads(2);
    const Result two = RunFused(q, k, v, dout, pos, pos, scale, c.tiling);
    at::set_num_threads(saved);
    EXPECT_TRUE(torch::equal(one.out, two.out));
    EXPECT_TRUE(torch::equal(one.lse, two.lse));
    EXPECT_TRUE(torch::equal(one.dq, two.dq));
  }
}

TEST(FusedCpuAttention, TheKernelMultipliesBFloat16AsChosenAndKeepsFloat64OnTheTiledKernel) {
  torch::manual_seed(9);
  const auto q = torch::randn({1, 2, 24, 16}), k = torch::randn({1, 2, 24, 16});
  const auto q16 = q.to(torch::kBFloat16), k16 = k.to(torch::kBFloat16);
  const BlockPositions pos{Iota(24)};
  FusedCpuBlockKernel native({}, Bf16Gemm::kNative), widen({}, Bf16Gemm::kWiden);
  const BlockOutput a = native.Forward(q16, k16, k16, pos, pos, 0.25);
  const BlockOutput b = widen.Forward(q16, k16, k16, pos, pos, 0.25);
  EXPECT_EQ(a.out.scalar_type(), torch::kFloat);
  EXPECT_EQ(b.out.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(a.out, FusedCpuAttentionForward(q16, k16, k16, pos, pos, 0.25).out));
  EXPECT_TRUE(
      torch::equal(b.out, FusedCpuAttentionForward(q16.to(torch::kFloat), k16.to(torch::kFloat),
                                                   k16.to(torch::kFloat), pos, pos, 0.25)
                              .out));
  EXPECT_NE(native.Describe().find("bf16 GEMMs native"), std::string::npos) << native.Describe();
  EXPECT_NE(widen.Describe().find("bf16 GEMMs widen"), std::string::npos) << widen.Describe();
  // float32 inputs take the float32 path whatever the choice.
  EXPECT_TRUE(torch::equal(native.Forward(q, k, k, pos, pos, 0.25).out,
                           widen.Forward(q, k, k, pos, pos, 0.25).out));
  const BlockOutput f32 = native.Forward(q, k, k, pos, pos, 0.25);
  const BlockOutput f64 = native.Forward(q.to(torch::kFloat64), k.to(torch::kFloat64),
                                         k.to(torch::kFloat64), pos, pos, 0.25);
  EXPECT_EQ(f64.out.scalar_type(), torch::kFloat64);
  EXPECT_LE(MaxDiff(f64.out, f32.out), 1e-5);
}

TEST(AttentionRows, RoundsToBFloat16AsPyTorchDoes) {
  std::mt19937 rng(4);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> x;
  for (int i = 0; i < 997; ++i) {  // any bit pattern: NaNs, infinities, denormals, ties
    const uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, sizeof f);
    x.push_back(f);
  }
  for (float f : {0.0f, -0.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 3.3895314e38f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min()}) {
    x.push_back(f);
  }
  const at::Tensor want =
      torch::from_blob(x.data(), {int64_t(x.size())}).to(torch::kBFloat16).contiguous();
  const auto* want_bits = reinterpret_cast<const uint16_t*>(want.data_ptr<at::BFloat16>());
  for (CpuIsa isa : AvailableCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    ScopedCpuIsa level(isa);
    std::vector<uint16_t> y(x.size());
    RoundRowToBf16(x.data(), y.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      // PyTorch may convert with VCVTNEPS2BF16, which takes denormal inputs as 0; the kernel's
      // rounding keeps them (it never meets one: its rows are exps and products of normals).
      if (std::fpclassify(x[i]) == FP_SUBNORMAL) continue;
      if (std::isnan(x[i])) {
        EXPECT_EQ(y[i] & 0x7f80, 0x7f80) << i;  // a NaN stays a NaN (its payload may differ)
        EXPECT_NE(y[i] & 0x007f, 0) << i;
      } else {
        EXPECT_EQ(y[i], want_bits[i]) << "x = " << x[i];
      }
    }
  }
}

TEST(AttentionRows, ExpMatchesStdExpAndNeverMakesDenormals) {
  std::vector<float> x;
  for (float t = -100.0f; t <= 88.0f; t += 0.00137f) x.push_back(t);
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
        EXPECT_NEAR(y[i], want, 0x1p-23 * want) << "x = " << x[i];  // within 2 ulp
        EXPECT_EQ(std::fpclassify(y[i]), FP_NORMAL) << "x = " << x[i];
      }
    }
  }
}

// The row functions' bfloat16 outputs are their float outputs rounded (RoundRowToBf16, tested
// against PyTorch above), masked and partial tails included.
TEST(AttentionRows, BFloat16OutputsAreTheFloatOutputsRounded) {
  std::mt19937 rng(8);
  std::normal_distribution<float> normal;
  for (CpuIsa isa : AvailableCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    ScopedCpuIsa level(isa);
    for (int64_t n : {5, 16, 37}) {
      const int64_t visible = n - 3;
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = 3 * normal(rng);
      std::vector<uint16_t> rounded(static_cast<size_t>(n)), got(static_cast<size_t>(n), 0xffff);
      // Softmax step: with p16 the float row is left as it was.
      std::vector<float> s = x, s2 = x, acc(4, 1.0f), acc2(4, 1.0f);
      float max = 0.5f, sum = 2.0f, max2 = 0.5f, sum2 = 2.0f;
      SoftmaxRowStep(s.data(), n, visible, &max, &sum, acc.data(), 4);
      SoftmaxRowStep(s2.data(), n, visible, &max2, &sum2, acc2.data(), 4, got.data());
      RoundRowToBf16(s.data(), rounded.data(), n);
      EXPECT_EQ(got, rounded) << "softmax step, n " << n;
      EXPECT_EQ(s2, x);
      EXPECT_EQ(sum2, sum);
      EXPECT_EQ(acc2, acc);
      // Probabilities: the float row and its rounded twin.
      s = x, s2 = x;
      std::fill(got.begin(), got.end(), 0xffff);
      ProbabilityRow(s.data(), n, visible, 4.0f);
      ProbabilityRow(s2.data(), n, visible, 4.0f, got.data());
      RoundRowToBf16(s.data(), rounded.data(), n);
      EXPECT_EQ(s2, s);
      EXPECT_EQ(got, rounded) << "probability, n " << n;
      // Score gradients: with ds16 the float row is left as it was.
      std::vector<float> dp = x, dp2 = x;
      std::fill(got.begin(), got.end(), 0xffff);
      ScoreGradRow(dp.data(), s.data(), n, 0.3f);
      ScoreGradRow(dp2.data(), s.data(), n, 0.3f, got.data());
      RoundRowToBf16(dp.data(), rounded.data(), n);
      EXPECT_EQ(got, rounded) << "score gradient, n " << n;
      EXPECT_EQ(dp2, x);
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
