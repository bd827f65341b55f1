// The fused CPU blocks (model/fused_blocks.h) against the ATen chains they replace and against
// float64 autograd: forward and gradients, odd sizes (rows past one weight-gradient block, dims not
// a multiple of any vector width), bfloat16 inputs (widened, within bfloat16's rounding), extreme
// SwiGLU inputs (no NaN, no denormal), at every CPU level this machine has (cpu_isa.h); and bitwise
// the same twice and on 1 or 2 threads.
#include "worker/engine/model/fused_blocks.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "tests/unit/tensor_compare.h"
#include "worker/engine/kernels/cpu_isa.h"
#include "worker/engine/model/rope.h"

namespace ringtrain {
namespace {

// ---- RMSNorm ----

at::Tensor ChainRmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  const at::Tensor xf = x.to(torch::kFloat32);
  const at::Tensor normed = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps);
  return normed.to(x.scalar_type()) * w.to(x.scalar_type());
}

struct NormGrads {
  at::Tensor y, dx, dw;
};

NormGrads RunNorm(bool fused, const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& dy) {
  const at::Tensor x = Leaf(x0), w = Leaf(w0);
  const at::Tensor y = fused ? FusedRmsNorm(x, w, 1e-5) : ChainRmsNorm(x, w, 1e-5);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad()};
}

TEST(FusedBlocks, RmsNormMatchesTheChainAndFloat64AtEveryLevel) {
  torch::manual_seed(1);
  // 3 × 47 = 141 rows (past two weight-gradient blocks of 64), C 37 (no vector width divides it).
  const at::Tensor x = torch::randn({3, 47, 37}) * 2;
  const at::Tensor w = torch::rand({37}) + 0.5;
  const at::Tensor dy = torch::randn({3, 47, 37});
  NormGrads f64;
  {
    const at::Tensor x64 = Leaf(x.to(torch::kFloat64)), w64 = Leaf(w.to(torch::kFloat64));
    const at::Tensor y = x64 * torch::rsqrt(x64.pow(2).mean(-1, true) + 1e-5) * w64;
    y.backward(dy.to(torch::kFloat64));
    f64 = {y.detach(), x64.grad(), w64.grad()};
  }
  const NormGrads chain = RunNorm(false, x, w, dy);
  for (CpuIsa isa : AvailableCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    ScopedCpuIsa level(isa);
    const NormGrads got = RunNorm(true, x, w, dy);
    EXPECT_LE(RelDiff(got.y, f64.y), 1e-6);
    EXPECT_LE(RelDiff(got.dx, f64.dx), 2e-6);
    EXPECT_LE(RelDiff(got.dw, f64.dw), 2e-6);
    EXPECT_LE(RelDiff(got.y, chain.y), 1e-6);
    EXPECT_LE(RelDiff(got.dx, chain.dx), 2e-6);
    EXPECT_LE(RelDiff(got.dw, chain.dw), 2e-6);
    EXPECT_EQ(got.dw.scalar_type(), torch::kFloat32);
  }
}

TEST(FusedBlocks, RmsNormWidensBFloat16LikeTheChain) {
  torch::manual_seed(2);
  const at::Tensor x = (torch::randn({70, 40}) * 3).to(torch::kBFloat16);
  const at::Tensor w = torch::rand({40}) + 0.5;  // float32 master weight, as under mixed precision
  const at::Tensor dy = torch::randn({70, 40}).to(torch::kBFloat16);
  const NormGrads chain = RunNorm(false, x, w, dy);
  for (CpuIsa isa : AvailableCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    ScopedCpuIsa level(isa);
    const NormGrads got = RunNorm(true, x, w, dy);
    EXPECT_EQ(got.y.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(got.dx.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(got.dw.scalar_type(), torch::kFloat32);
    // bfloat16 keeps 8 bits: one rounding of the output apart at most.
    EXPECT_LE(RelDiff(got.y, chain.y), 1.0 / 128);
    EXPECT_LE(RelDiff(got.dx, chain.dx), 1.0 / 64);
    EXPECT_LE(RelDiff(got.dw, chain.dw), 1.0 / 128);
  }
}

TEST(FusedBlocks, RmsNormIsBitwiseRepeatableOnOneOrTwoThreads) {
  torch::manual_seed(3);
  const at::Tensor x = torch::randn({300, 96}), w = torch::rand({96}), dy = torch::randn({300, 96});
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const NormGrads one = RunNorm(true, x, w, dy);
  at::set_num_threads(2);
  const NormGrads two = RunNorm(true, x, w, dy);
  const NormGrads again = RunNorm(true, x, w, dy);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(one.y, two.y));
  EXPECT_TRUE(torch::equal(one.dx, two.dx));
  EXPECT_TRUE(torch::equal(one.dw, two.dw));
  EXPECT_TRUE(torch::equal(two.dw, again.dw));
}

// ---- RoPE ----

struct RopeGrads {
  at::Tensor q, k, dq, dk;
};

RopeGrads RunRope(bool fused, const RotaryTables& rope, const at::Tensor& q0, const at::Tensor& k0,
                  const at::Tensor& positions, const at::Tensor& dq, const at::Tensor& dk) {
  const at::Tensor q = Leaf(q0), k = Leaf(k0);
  at::Tensor qo, ko;
  if (fused) {
    std::tie(qo, ko) = FusedRopeQK(q, k, rope.cos(), rope.sin(), positions);
  } else {
    qo = rope.Apply(q, positions).transpose(1, 2).contiguous();
    ko = rope.Apply(k, positions).transpose(1, 2).contiguous();
  }
  torch::autograd::backward({qo, ko}, {dq, dk});
  return {qo.detach(), ko.detach(), q.grad(), k.grad()};
}

TEST(FusedBlocks, RopeMatchesTheChainAndFloat64AtEveryLevel) {
  torch::manual_seed(4);
  const int64_t batch = 2, length = 13, heads = 3, kv_heads = 1;
  const RotaryTables rope(/*head_dim=*/20, /*max_seq_len=*/64, /*theta=*/10000.0);
  // Head-tail-like positions: not contiguous, not in order.
  const at::Tensor positions =
      torch::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 57, 58, 59, 60, 61, 63});
  const at::Tensor q = torch::randn({batch, length, heads, 20});
  const at::Tensor k = torch::randn({batch, length, kv_heads, 20});
  const at::Tensor dq = torch::randn({batch, heads, length, 20});
  const at::Tensor dk = torch::randn({batch, kv_heads, length, 20});
  // float64: rotate with float64 tables, autograd through it.
  RopeGrads f64;
  {
    const at::Tensor cos = rope.cos().index_select(0, positions).to(torch::kFloat64);
    const at::Tensor sin = rope.sin().index_select(0, positions).to(torch::kFloat64);
    auto rotate = [&](const at::Tensor& x) {
      const auto pairs = x.reshape({batch, length, x.size(2), 10, 2});
      const auto re = pairs.select(-1, 0), im = pairs.select(-1, 1);
      const auto c = cos.view({1, length, 1, 10}), s = sin.view({1, length, 1, 10});
      return torch::stack({re * c - im * s, re * s + im * c}, -1).flatten(3).transpose(1, 2);
    };
    const at::Tensor q64 = Leaf(q.to(torch::kFloat64)), k64 = Leaf(k.to(torch::kFloat64));
    const at::Tensor qo = rotate(q64), ko = rotate(k64);
    torch::autograd::backward({qo, ko}, {dq.to(torch::kFloat64), dk.to(torch::kFloat64)});
    f64 = {qo.detach(), ko.detach(), q64.grad(), k64.grad()};
  }
  const RopeGrads chain = RunRope(false, rope, q, k, positions, dq, dk);
  for (CpuIsa isa : AvailableCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    ScopedCpuIsa level(isa);
    const RopeGrads got = RunRope(true, rope, q, k, positions, dq, dk);
    ASSERT_TRUE(got.q.is_contiguous());
    EXPECT_EQ(got.q.sizes(), chain.q.sizes());
    EXPECT_LE(MaxDiff(got.q, f64.q), 1e-6);
    EXPECT_LE(MaxDiff(got.k, f64.k), 1e-6);
    EXPECT_LE(MaxDiff(got.dq, f64.dq), 1e-6);
    EXPECT_LE(MaxDiff(got.dk, f64.dk), 1e-6);
    EXPECT_LE(MaxDiff(got.q, chain.q), 1e-6);
    EXPECT_LE(MaxDiff(got.dk, chain.dk), 1e-6);
  }
  // bfloat16: the chain's float32 rotation rounded once, as here.
  const RopeGrads chain16 = RunRope(false, rope, q.to(torch::kBFloat16), k.to(torch::kBFloat16),
                                    positions, dq.to(torch::kBFloat16), dk.to(torch::kBFloat16));
  const RopeGrads got16 = RunRope(true, rope, q.to(torch::kBFloat16), k.to(torch::kBFloat16),
                                  positions, dq.to(torch::kBFloat16), dk.to(torch::kBFloat16));
  EXPECT_EQ(got16.q.scalar_type(), torch::kBFloat16);
  EXPECT_LE(RelDiff(got16.q, chain16.q), 1.0 / 128);
  EXPECT_LE(RelDiff(got16.dq, chain16.dq), 1.0 / 128);
}

// ---- SwiGLU ----

TEST(FusedBlocks, SwiGluMatchesTheChainAndFloat64AtEveryLevel) {
  torch::manual_seed(5);
  at::Tensor a = torch::randn({5, 3, 29}) * 4;
  a[0][0][0] = -200.0f;  // exp(200) overflows: silu → −0, no NaN
  a[0][0][1] = 200.0f;
  a[0][0][2] = -90.0f;  // would make denormals
  const at::Tensor b = torch::randn({5, 3, 29}), dh = torch::randn({5, 3, 29});
  at::Tensor fa, fb, fh;
  {
    const at::Tensor a64 = Leaf(a.to(torch::kFloat64)), b64 = Leaf(b.to(torch::kFloat64));
    const at::Tensor h = a64 * torch::sigmoid(a64) * b64;
    h.backward(dh.to(torch::kFloat64));
    fa = a64.grad(), fb = b64.grad(), fh = h.detach();
  }
  for (CpuIsa isa : AvailableCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    ScopedCpuIsa level(isa);
    const at::Tensor a1 = Leaf(a), b1 = Leaf(b);
    const at::Tensor h = FusedSwiGlu(a1, b1);
    h.backward(dh);
    EXPECT_LE(MaxDiff(h, fh), 1e-5);
    EXPECT_LE(MaxDiff(a1.grad(), fa), 1e-5);
    EXPECT_LE(MaxDiff(b1.grad(), fb), 1e-5);
    for (const at::Tensor& t : {h, a1.grad(), b1.grad()}) {
      EXPECT_TRUE(torch::isfinite(t).all().item<bool>());
      const at::Tensor tiny = (t.abs() < 1.1754944e-38f) & (t != 0);
      EXPECT_FALSE(tiny.any().item<bool>()) << "a denormal result";
    }
    const at::Tensor a2 = Leaf(a), b2 = Leaf(b);
    const at::Tensor again = FusedSwiGlu(a2, b2);
    again.backward(dh);
    EXPECT_TRUE(torch::equal(h, again));
    EXPECT_TRUE(torch::equal(a1.grad(), a2.grad()));
  }
  // bfloat16 against the chain.
  const at::Tensor a16 = Leaf(a.to(torch::kBFloat16)), b16 = Leaf(b.to(torch::kBFloat16));
  const at::Tensor c16 = Leaf(a.to(torch::kBFloat16)), d16 = Leaf(b.to(torch::kBFloat16));
  const at::Tensor got = FusedSwiGlu(a16, b16), want = torch::silu(c16) * d16;
  got.backward(dh.to(torch::kBFloat16));
  want.backward(dh.to(torch::kBFloat16));
  EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
  EXPECT_LE(RelDiff(got, want), 1.0 / 64);
  EXPECT_LE(RelDiff(a16.grad(), c16.grad()), 1.0 / 64);
}

}  // namespace
}  // namespace ringtrain
