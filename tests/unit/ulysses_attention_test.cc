// Ulysses and hybrid Ulysses × ring attention alone, random inputs: cp ranks are threads of this
// process with their own Gloo groups. Each rank's output and dQ/dK/dV must equal local attention
// over the whole sequence (cp = 1, the tiled kernel) within 1e-5, for Ulysses over the whole cp
// group and hybrid groups; K/V heads split and replicated (fewer K/V heads than the degree); the
// headtail, none and document balancers; plain causal and packed documents; both rotate methods
// for the ring part; the cpu_flash, torch_flash and tiled block kernels. Also: every rank of a
// Ulysses group computes the same number of scores whatever the balancer, and a run repeated gives
// bitwise the same results.
#include "worker/engine/parallel/ulysses_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "tests/unit/packed_documents.h"
#include "tests/unit/thread_world.h"
#include "worker/engine/parallel/cp_shard.h"
#include "worker/engine/parallel/mesh.h"

namespace ringtrain {
namespace {

constexpr int64_t kEos = 3;

struct Case {
  int64_t cp, ulysses;
  int64_t heads, kv_heads;
  LoadBalancer balancer;
  RotateMethod rotate;
  std::vector<int64_t> doc_lengths;  // empty: plain causal
  AttentionKernelKind kernel = AttentionKernelKind::kCpuFlash;
};

std::string Name(const Case& c) {
  std::string name = c.ulysses == c.cp ? "ulysses" + std::to_string(c.cp)
                                       : "hybrid" + std::to_string(c.ulysses) + "x" +
                                             std::to_string(c.cp / c.ulysses);
  return name + "_h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads) + "_" +
         ChoiceName(c.balancer) + "_" + ChoiceName(c.rotate) +
         (c.doc_lengths.empty() ? "" : "_documents") + "_" + ChoiceName(c.kernel);
}

struct RankResult {
  at::Tensor out, dq, dk, dv;
  std::vector<int64_t> positions;
  int64_t scores = 0;
};

std::vector<RankResult> RunUlysses(const Case& c, const at::Tensor& tokens, const at::Tensor& q,
                                   const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                                   double scale) {
  const int64_t length = q.size(2);
  std::vector<RankResult> results(size_t(c.cp));
  Mesh mesh{0, c.cp, 1, c.cp};
  mesh.ulysses = c.ulysses;
  RunOnMesh(mesh, [&](int64_t r, Communicator& comm) {
    auto plan =
        std::make_shared<UlyssesAttentionPlan>(&comm, length, c.balancer, c.rotate, c.kernel);
    std::optional<int64_t> eos;
    if (!c.doc_lengths.empty()) eos = kEos;
    const ShardedBatch shard = CpShard(tokens, tokens, ShardSpec{c.cp, r, c.balancer, eos});
    const at::Tensor idx = shard.positions.AsTensor();
    auto ql = q.index_select(2, idx).requires_grad_();
    auto kl = k.index_select(2, idx).requires_grad_();
    auto vl = v.index_select(2, idx).requires_grad_();
    const at::Tensor out = plan->Attend(ql, kl, vl, shard.positions, scale);
    const auto g = torch::autograd::grad({out}, {ql, kl, vl}, {dout.index_select(2, idx)});
    results[size_t(r)] = {
        out.detach(), g[0], g[1], g[2], shard.positions.positions, plan->stats().scores_computed};
  });
  return results;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

class UlyssesAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(UlyssesAttentionTest, MatchesLocalAttentionOverTheWholeSequence) {
  const Case c = GetParam();
  const int64_t batch = 2, length = 64, dim = 8;
  const at::Tensor tokens = PackedTokens(batch, length, c.doc_lengths, kEos);
  torch::manual_seed(31);
  const auto q = torch::randn({batch, c.heads, length, dim});
  const auto k = torch::randn({batch, c.kv_heads, length, dim});
  const auto v = torch::randn({batch, c.kv_heads, length, dim});
  const auto dout = torch::randn({batch, c.heads, length, dim});
  const double scale = 1.0 / std::sqrt(double(dim));

  BlockPositions all;
  all.positions.resize(size_t(length));
  std::iota(all.positions.begin(), all.positions.end(), 0);
  if (!c.doc_lengths.empty()) all.documents = MaskOf(tokens, kEos);
  const auto qr = q.clone().requires_grad_(), kr = k.clone().requires_grad_(),
             vr = v.clone().requires_grad_();
  const at::Tensor want = LocalCausalAttention(qr, kr, vr, all, scale, {16, 16});
  const auto wg = torch::autograd::grad({want}, {qr, kr, vr}, {dout});

  const std::vector<RankResult> results = RunUlysses(c, tokens, q, k, v, dout, scale);
  for (int64_t r = 0; r < c.cp; ++r) {
    const RankResult& got = results[size_t(r)];
    ASSERT_TRUE(got.out.defined()) << "rank " << r;
    const auto idx = torch::tensor(got.positions);
    EXPECT_LE(MaxDiff(got.out, want.detach().index_select(2, idx)), 1e-5) << "rank " << r;
    EXPECT_LE(MaxDiff(got.dq, wg[0].index_select(2, idx)), 1e-5) << "rank " << r;
    EXPECT_LE(MaxDiff(got.dk, wg[1].index_select(2, idx)), 1e-5) << "rank " << r;
    EXPECT_LE(MaxDiff(got.dv, wg[2].index_select(2, idx)), 1e-5) << "rank " << r;
  }
  // Heads, not positions, are split inside a group: its ranks compute the same number of scores.
  for (int64_t r = 0; r < c.cp; ++r) {
    const int64_t first = r - r % c.ulysses;
    EXPECT_EQ(results[size_t(r)].scores, results[size_t(first)].scores) << "rank " << r;
  }
}

const std::vector<int64_t> kMixed = {1, 1, 5, 40, 3, 1, 17, 2, 60};

INSTANTIATE_TEST_SUITE_P(
    Methods, UlyssesAttentionTest,
    ::testing::Values(
        Case{2, 2, 4, 2, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, {}},
        Case{4, 4, 4, 2, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, {}},  // K/V replicated
        Case{4, 4, 8, 1, LoadBalancer::kNone, RotateMethod::kAllToAll, {}},
        Case{4, 2, 4, 4, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, {}},
        Case{4, 2, 4, 1, LoadBalancer::kNone, RotateMethod::kAllGather, {}},
        Case{4, 2, 4, 2, LoadBalancer::kDocument, RotateMethod::kAllToAll, kMixed},
        Case{4, 4, 8, 2, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, kMixed},
        Case{2, 2, 4, 4, LoadBalancer::kDocument, RotateMethod::kAllGather, kMixed},
        // Every block kernel: PyTorch's fused ones (cut at document bounds) and the tiled one.
        Case{4, 4, 8, 2, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, kMixed,
             AttentionKernelKind::kTorchFlash},
        Case{4,
             2,
             4,
             2,
             LoadBalancer::kHeadTail,
             RotateMethod::kAllToAll,
             {},
             AttentionKernelKind::kTorchFlash},
        Case{4, 2, 4, 1, LoadBalancer::kDocument, RotateMethod::kAllGather, kMixed,
             AttentionKernelKind::kTiled}),
    [](const auto& info) { return Name(info.param); });

TEST(UlyssesAttentionRepeat, SameInputsGiveBitwiseTheSameResults) {
  const Case c{4, 2, 4, 2, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, kMixed};
  const at::Tensor tokens = PackedTokens(1, 32, c.doc_lengths, kEos);
  torch::manual_seed(5);
  const auto q = torch::randn({1, 4, 32, 8});
  const auto k = torch::randn({1, 2, 32, 8});
  const auto v = torch::randn({1, 2, 32, 8});
  const auto dout = torch::randn({1, 4, 32, 8});
  const auto a = RunUlysses(c, tokens, q, k, v, dout, 0.3);
  const auto b = RunUlysses(c, tokens, q, k, v, dout, 0.3);
  for (int64_t r = 0; r < c.cp; ++r) {
    EXPECT_TRUE(torch::equal(a[size_t(r)].out, b[size_t(r)].out)) << "rank " << r;
    EXPECT_TRUE(torch::equal(a[size_t(r)].dq, b[size_t(r)].dq)) << "rank " << r;
    EXPECT_TRUE(torch::equal(a[size_t(r)].dk, b[size_t(r)].dk)) << "rank " << r;
    EXPECT_TRUE(torch::equal(a[size_t(r)].dv, b[size_t(r)].dv)) << "rank " << r;
  }
}

}  // namespace
}  // namespace ringtrain
