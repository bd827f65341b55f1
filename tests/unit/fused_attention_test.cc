// The fused block kernel on the CPU (PyTorch's CPU flash kernel): the same code path CUDA ranks
// take — the block plan, the per-call log-sum-exp merge, GQA expansion, backward from the final
// statistics — checked against the tiled kernel and plain softmax attention, local and as ring
// attention over threads; bf16 against float32; the kernel choice; and the ring through the host
// staging Gloo uses for device tensors, which must not change a bit.
#include "worker/engine/kernels/block_kernel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <numeric>

#include "tests/unit/reference_attention.h"
#include "tests/unit/tensor_compare.h"
#include "tests/unit/thread_world.h"
#include "worker/engine/model/attention_plan.h"
#include "worker/engine/parallel/mesh.h"
#include "worker/engine/parallel/ring_attention.h"

namespace ringtrain {
namespace {

BlockPositions Iota(int64_t n) {
  BlockPositions p;
  p.positions.resize(n);
  std::iota(p.positions.begin(), p.positions.end(), 0);
  return p;
}

struct Grads {
  at::Tensor out, dq, dk, dv;
};

Grads RunLocal(const std::shared_ptr<BlockKernel>& block, const at::Tensor& q, const at::Tensor& k,
               const at::Tensor& v, const at::Tensor& dout, double scale) {
  auto ql = q.detach().requires_grad_(), kl = k.detach().requires_grad_(),
       vl = v.detach().requires_grad_();
  auto kernel = std::make_shared<LocalAttentionPlan>(block);
  const at::Tensor out = kernel->Attend(ql, kl, vl, Iota(q.size(2)), scale);
  const auto g = torch::autograd::grad({out}, {ql, kl, vl}, {dout.to(out.scalar_type())});
  return {out.detach(), g[0], g[1], g[2]};
}

class FusedLocalTest : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(FusedLocalTest, MatchesTiledAndPlainAttention) {
  const auto [heads, kv_heads] = GetParam();
  torch::manual_seed(11);
  const int64_t len = 48, dim = 16;
  const auto q = torch::randn({2, heads, len, dim}), k = torch::randn({2, kv_heads, len, dim}),
             v = torch::randn({2, kv_heads, len, dim}), dout = torch::randn({2, heads, len, dim});
  const double scale = 1.0 / std::sqrt(double(dim));
  const Grads fused = RunLocal(std::make_shared<FusedBlockKernel>(), q, k, v, dout, scale);
  const Grads tiled =
      RunLocal(std::make_shared<TiledBlockKernel>(AttentionTiling{16, 16}), q, k, v, dout, scale);
  auto qr = q.clone().requires_grad_(), kr = k.clone().requires_grad_(),
       vr = v.clone().requires_grad_();
  const auto plain =
      ReferenceAttention(qr, kr, vr, Iota(len).positions, Iota(len).positions, true, scale);
  const auto pg = torch::autograd::grad({plain}, {qr, kr, vr}, {dout});
  for (const Grads* other : {&tiled}) {
    EXPECT_LE(MaxDiff(fused.out, other->out), 1e-5);
    EXPECT_LE(MaxDiff(fused.dq, other->dq), 1e-5);
    EXPECT_LE(MaxDiff(fused.dk, other->dk), 1e-5);
    EXPECT_LE(MaxDiff(fused.dv, other->dv), 1e-5);
  }
  EXPECT_LE(MaxDiff(fused.out, plain), 1e-5);
  EXPECT_LE(MaxDiff(fused.dq, pg[0]), 1e-5);
  EXPECT_LE(MaxDiff(fused.dk, pg[1]), 1e-5);
  EXPECT_LE(MaxDiff(fused.dv, pg[2]), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Heads, FusedLocalTest,
                         ::testing::Values(std::make_pair(4, 4), std::make_pair(4, 2),
                                           std::make_pair(6, 1)));

// bf16 inputs: outputs and gradients come back in bf16, within bf16's precision of the float32
// result, and not equal to it (the kernel really ran in bf16).
TEST(FusedAttentionTest, Bfloat16IsCloseToFloat32) {
  torch::manual_seed(12);
  const int64_t len = 64, dim = 16;
  const auto q = torch::randn({1, 4, len, dim}), k = torch::randn({1, 2, len, dim}),
             v = torch::randn({1, 2, len, dim}), dout = torch::randn({1, 4, len, dim});
  const double scale = 1.0 / std::sqrt(double(dim));
  for (const auto& block : {std::shared_ptr<BlockKernel>(std::make_shared<FusedBlockKernel>()),
                            std::shared_ptr<BlockKernel>(std::make_shared<TiledBlockKernel>())}) {
    const Grads f32 = RunLocal(block, q, k, v, dout, scale);
    const Grads bf = RunLocal(block, q.to(torch::kBFloat16), k.to(torch::kBFloat16),
                              v.to(torch::kBFloat16), dout, scale);
    EXPECT_EQ(bf.out.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(bf.dk.scalar_type(), torch::kBFloat16);
    for (const auto& [a, b] : {std::make_pair(bf.out, f32.out), std::make_pair(bf.dq, f32.dq),
                               std::make_pair(bf.dk, f32.dk), std::make_pair(bf.dv, f32.dv)}) {
      const double rel = MaxDiff(a, b) / b.abs().max().item<double>();
      EXPECT_LT(rel, 3e-2) << block->Describe();
      EXPECT_GT(MaxDiff(a, b), 0.0) << block->Describe();
    }
  }
}

TEST(FusedAttentionTest, KernelChoice) {
  // auto is the fused CPU flash kernel (cpu_flash) on the CPU.
  EXPECT_NE(MakeBlockKernel(AttentionKernelKind::kAuto, c10::Device(c10::kCPU))
                ->Describe()
                .find("cpu_flash: fused CPU"),
            std::string::npos);
  EXPECT_NE(MakeBlockKernel(AttentionKernelKind::kTiled, c10::Device(c10::kCPU))
                ->Describe()
                .find("tiled"),
            std::string::npos);
  EXPECT_NE(MakeBlockKernel(AttentionKernelKind::kTorchFlash, c10::Device(c10::kCPU))
                ->Describe()
                .find("fused"),
            std::string::npos);
  EXPECT_NE(MakeBlockKernel(AttentionKernelKind::kTiled, c10::Device(c10::kCUDA, 0))
                ->Describe()
                .find("tiled"),
            std::string::npos);
  // auto is fused on CUDA (the device is not touched to decide).
  EXPECT_NE(MakeBlockKernel(AttentionKernelKind::kAuto, c10::Device(c10::kCUDA, 0))
                ->Describe()
                .find("fused"),
            std::string::npos);
  const auto t = torch::zeros({1, 2, 4, 8});
  EXPECT_EQ(FusedBlockKernel().Resolve(t, t, true), FusedBackend::kCpuFlash);
  EXPECT_EQ(FusedBlockKernel(FusedBackend::kFlash).Resolve(t, t, true), FusedBackend::kFlash);
}

// Positions the plan cannot cut (no consecutive runs) go to the tiled fallback, same result.
TEST(FusedAttentionTest, ScatteredPositionsFallBackToTiled) {
  torch::manual_seed(13);
  BlockPositions qp, kp;
  for (int64_t i = 0; i < 40; ++i) {
    qp.positions.push_back(4 * i + 1);
    kp.positions.push_back(4 * i);
  }
  const auto q = torch::randn({1, 2, 40, 8}), k = torch::randn({1, 2, 40, 8}),
             v = torch::randn({1, 2, 40, 8});
  FusedBlockKernel fused(FusedBackend::kAuto, {8, 8});
  TiledBlockKernel tiled({8, 8});
  const BlockOutput a = fused.Forward(q, k, v, qp, kp, 0.3);
  const BlockOutput b = tiled.Forward(q, k, v, qp, kp, 0.3);
  EXPECT_TRUE(torch::equal(a.out, b.out));
  EXPECT_TRUE(torch::equal(a.lse, b.lse));
}

struct RingCase {
  int64_t cp;
  LoadBalancer balancer;
  RotateMethod rotate;
  int64_t heads, kv_heads;
};

// Each rank's (out, dq, dk, dv) of ring attention with the fused kernel, ranks as threads.
std::vector<Grads> RunRing(const RingCase& c, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const at::Tensor& dout, double scale, bool staged) {
  const int64_t seq_len = q.size(2);
  std::vector<Grads> results(c.cp);
  RunOnThreads(
      c.cp, 1,
      [&](int64_t r, Communicator& comm) {
        auto kernel = std::make_shared<RingAttentionPlan>(&comm, seq_len, c.balancer, c.rotate,
                                                          AttentionKernelKind::kTorchFlash);
        const BlockPositions pos{ShardPositions(seq_len, c.cp, r, c.balancer)};
        const at::Tensor idx = pos.AsTensor();
        auto ql = q.index_select(2, idx).detach().requires_grad_();
        auto kl = k.index_select(2, idx).detach().requires_grad_();
        auto vl = v.index_select(2, idx).detach().requires_grad_();
        const at::Tensor out = kernel->Attend(ql, kl, vl, pos, scale);
        const auto g = torch::autograd::grad({out}, {ql, kl, vl}, {dout.index_select(2, idx)});
        results[r] = {out.detach(), g[0], g[1], g[2]};
      },
      staged);
  return results;
}

class FusedRingTest : public ::testing::TestWithParam<RingCase> {};

TEST_P(FusedRingTest, MatchesUnshardedAttentionAndStagingChangesNothing) {
  const RingCase c = GetParam();
  const int64_t seq_len = 64, dim = 16;
  torch::manual_seed(1234);
  const auto q = torch::randn({2, c.heads, seq_len, dim}).requires_grad_();
  const auto k = torch::randn({2, c.kv_heads, seq_len, dim}).requires_grad_();
  const auto v = torch::randn({2, c.kv_heads, seq_len, dim}).requires_grad_();
  const auto dout = torch::randn({2, c.heads, seq_len, dim});
  const double scale = 1.0 / std::sqrt(double(dim));
  const auto all = Iota(seq_len).positions;
  const auto plain = ReferenceAttention(q, k, v, all, all, true, scale);
  const auto pg = torch::autograd::grad({plain}, {q, k, v}, {dout});

  const auto direct = RunRing(c, q.detach(), k.detach(), v.detach(), dout, scale, false);
  const auto staged = RunRing(c, q.detach(), k.detach(), v.detach(), dout, scale, true);
  for (int64_t r = 0; r < c.cp; ++r) {
    ASSERT_TRUE(direct[r].out.defined() && staged[r].out.defined());
    const auto idx = torch::tensor(ShardPositions(seq_len, c.cp, r, c.balancer));
    EXPECT_LE(MaxDiff(direct[r].out, plain.index_select(2, idx)), 1e-5) << "rank " << r;
    EXPECT_LE(MaxDiff(direct[r].dq, pg[0].index_select(2, idx)), 1e-5) << "rank " << r;
    EXPECT_LE(MaxDiff(direct[r].dk, pg[1].index_select(2, idx)), 1e-5) << "rank " << r;
    EXPECT_LE(MaxDiff(direct[r].dv, pg[2].index_select(2, idx)), 1e-5) << "rank " << r;
    EXPECT_TRUE(torch::equal(direct[r].out, staged[r].out)) << "rank " << r;
    EXPECT_TRUE(torch::equal(direct[r].dq, staged[r].dq)) << "rank " << r;
    EXPECT_TRUE(torch::equal(direct[r].dk, staged[r].dk)) << "rank " << r;
    EXPECT_TRUE(torch::equal(direct[r].dv, staged[r].dv)) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, FusedRingTest,
    ::testing::Values(RingCase{2, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, 4, 2},
                      RingCase{4, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, 4, 4},
                      RingCase{4, LoadBalancer::kHeadTail, RotateMethod::kAllGather, 4, 2},
                      RingCase{4, LoadBalancer::kNone, RotateMethod::kAllToAll, 4, 2},
                      RingCase{2, LoadBalancer::kNone, RotateMethod::kAllGather, 4, 1}),
    [](const auto& info) {
      const RingCase& c = info.param;
      return "cp" + std::to_string(c.cp) + "_" + ChoiceName(c.balancer) + "_" +
             ChoiceName(c.rotate) + "_h" + std::to_string(c.heads) + "kv" +
             std::to_string(c.kv_heads);
    });

}  // namespace
}  // namespace ringtrain
