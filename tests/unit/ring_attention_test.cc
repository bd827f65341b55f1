// Ring attention alone, random inputs: cp ranks are threads of this process, each with its own Gloo
// process groups over one shared HashStore. Forward output and dQ/dK/dV must equal the unsharded
// tiled attention, and the plain (non-tiled) softmax attention, within 1e-5, for cp ∈ {2, 4},
// headtail and none, alltoall and allgather, MHA and GQA. Also: the causal skip (half a block per
// step with headtail), the two rotate methods agreeing bitwise, and the ring's wait points.
#include "worker/engine/parallel/ring_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <numeric>

#include "tests/unit/reference_attention.h"
#include "tests/unit/thread_world.h"
#include "worker/engine/parallel/cp_shard.h"
#include "worker/engine/parallel/kv_exchange.h"
#include "worker/engine/parallel/mesh.h"

namespace ringtrain {
namespace {

struct Case {
  int64_t cp;
  LoadBalancer balancer;
  RotateMethod rotate;
  int64_t heads, kv_heads;
};

std::string Name(const Case& c) {
  return "cp" + std::to_string(c.cp) + "_" + ChoiceName(c.balancer) + "_" + ChoiceName(c.rotate) +
         "_h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads);
}

struct RankResult {
  at::Tensor out, dq, dk, dv;
  std::vector<int64_t> scores_per_step;
  std::vector<double> ring_waits;  // the communicator's, after forward and backward
  double ring_wait_seconds = 0;
  double exposed_transfer = -1;  // ExposedRingTransfer
};

// Runs ring attention on `cp` threads; returns each rank's shard results.
std::vector<RankResult> RunRing(const Case& c, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& v, const at::Tensor& dout, double scale) {
  const int64_t seq_len = q.size(2);
  std::vector<RankResult> results(c.cp);
  RunOnThreads(c.cp, 1, [&](int64_t r, Communicator& comm) {
    auto kernel = std::make_shared<RingAttentionPlan>(&comm, seq_len, c.balancer, c.rotate);
    const BlockPositions pos{ShardPositions(seq_len, c.cp, r, c.balancer)};
    const at::Tensor idx = pos.AsTensor();
    auto ql = q.index_select(2, idx).detach().requires_grad_();
    auto kl = k.index_select(2, idx).detach().requires_grad_();
    auto vl = v.index_select(2, idx).detach().requires_grad_();
    const at::Tensor out = kernel->Attend(ql, kl, vl, pos, scale);
    results[r].scores_per_step = kernel->stats().scores_per_step;
    const auto grads = torch::autograd::grad({out}, {ql, kl, vl}, {dout.index_select(2, idx)});
    results[r].out = out.detach();
    results[r].dq = grads[0];
    results[r].dk = grads[1];
    results[r].dv = grads[2];
    results[r].ring_waits = comm.stats().ring_waits;
    results[r].ring_wait_seconds = comm.stats().ring_wait_seconds;
    results[r].exposed_transfer = ExposedRingTransfer(comm);
  });
  return results;
}

class RingAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(RingAttentionTest, MatchesUnshardedAttention) {
  const Case c = GetParam();
  const int64_t seq_len = 64, dim = 16;
  torch::manual_seed(1234);
  const auto q = torch::randn({2, c.heads, seq_len, dim}).requires_grad_();
  const auto k = torch::randn({2, c.kv_heads, seq_len, dim}).requires_grad_();
  const auto v = torch::randn({2, c.kv_heads, seq_len, dim}).requires_grad_();
  const auto dout = torch::randn({2, c.heads, seq_len, dim});
  const double scale = 1.0 / std::sqrt(double(dim));
  BlockPositions all;
  all.positions.resize(seq_len);
  std::iota(all.positions.begin(), all.positions.end(), 0);
  const auto expected = LocalCausalAttention(q, k, v, all, scale, {16, 16});
  const auto eg = torch::autograd::grad({expected}, {q, k, v}, {dout});
  const auto plain = ReferenceAttention(q, k, v, all.positions, all.positions, true, scale);
  const auto pg = torch::autograd::grad({plain}, {q, k, v}, {dout});

  const auto results = RunRing(c, q.detach(), k.detach(), v.detach(), dout, scale);
  for (int64_t r = 0; r < c.cp; ++r) {
    if (!results[r].out.defined()) return;
    const auto idx = torch::tensor(ShardPositions(seq_len, c.cp, r, c.balancer));
    const double tol = 1e-5;
    EXPECT_LE((results[r].out - expected.index_select(2, idx)).abs().max().item<double>(), tol);
    EXPECT_LE((results[r].dq - eg[0].index_select(2, idx)).abs().max().item<double>(), tol);
    EXPECT_LE((results[r].dk - eg[1].index_select(2, idx)).abs().max().item<double>(), tol);
    EXPECT_LE((results[r].dv - eg[2].index_select(2, idx)).abs().max().item<double>(), tol);
    EXPECT_LE((results[r].out - plain.index_select(2, idx)).abs().max().item<double>(), tol);
    EXPECT_LE((results[r].dq - pg[0].index_select(2, idx)).abs().max().item<double>(), tol);
    EXPECT_LE((results[r].dk - pg[1].index_select(2, idx)).abs().max().item<double>(), tol);
    EXPECT_LE((results[r].dv - pg[2].index_select(2, idx)).abs().max().item<double>(), tol);
  }
  // Masked-out blocks are never computed. Headtail: after the first step every rank computes
  // exactly half a block. None: rank r computes r full blocks after its diagonal one.
  const int64_t block = 2 * c.heads * (seq_len / c.cp) * (seq_len / c.cp);
  for (int64_t r = 0; r < c.cp; ++r) {
    const auto& steps = results[r].scores_per_step;
    ASSERT_EQ(int64_t(steps.size()), c.cp);
    for (int64_t i = 1; i < c.cp; ++i) {
      if (c.balancer == LoadBalancer::kHeadTail) {
        EXPECT_EQ(steps[i], block / 2) << "rank " << r << " step " << i;
      } else {
        EXPECT_EQ(steps[i], i <= r ? block : 0) << "rank " << r << " step " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, RingAttentionTest,
    ::testing::Values(Case{2, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, 4, 4},
                      Case{2, LoadBalancer::kHeadTail, RotateMethod::kAllGather, 4, 2},
                      Case{2, LoadBalancer::kNone, RotateMethod::kAllToAll, 4, 2},
                      Case{2, LoadBalancer::kNone, RotateMethod::kAllGather, 4, 4},
                      Case{4, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, 4, 2},
                      Case{4, LoadBalancer::kHeadTail, RotateMethod::kAllGather, 4, 4},
                      Case{4, LoadBalancer::kNone, RotateMethod::kAllToAll, 4, 4},
                      Case{4, LoadBalancer::kNone, RotateMethod::kAllGather, 4, 2},
                      Case{4, LoadBalancer::kHeadTail, RotateMethod::kAllToAll, 6, 3},
                      Case{2, LoadBalancer::kHeadTail, RotateMethod::kAllGather, 4, 1}),
    [](const auto& info) { return Name(info.param); });

// Random GQA inputs of the methods' tests: q and dout (1, 4, 48, 8), k and v (1, 2, 48, 8).
struct SmallInputs {
  at::Tensor q, k, v, dout;
};
SmallInputs RandomSmallInputs(uint64_t seed) {
  const int64_t seq_len = 48;
  torch::manual_seed(seed);
  SmallInputs in;
  in.q = torch::randn({1, 4, seq_len, 8});
  in.k = torch::randn({1, 2, seq_len, 8});
  in.v = torch::randn({1, 2, seq_len, 8});
  in.dout = torch::randn({1, 4, seq_len, 8});
  return in;
}

// Three ranks, headtail, 4 query heads over 2 K/V heads, scale 0.3.
std::vector<RankResult> RunSmallRing(RotateMethod rotate, const SmallInputs& in) {
  return RunRing({3, LoadBalancer::kHeadTail, rotate, 4, 2}, in.q, in.k, in.v, in.dout, 0.3);
}

TEST(RingAttentionMethods, AlltoallAndAllgatherAgreeBitwise) {
  const SmallInputs in = RandomSmallInputs(9);
  const auto a = RunSmallRing(RotateMethod::kAllToAll, in);
  const auto b = RunSmallRing(RotateMethod::kAllGather, in);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(torch::equal(a[r].out, b[r].out));
    EXPECT_TRUE(torch::equal(a[r].dq, b[r].dq));
    EXPECT_TRUE(torch::equal(a[r].dk, b[r].dk));
    EXPECT_TRUE(torch::equal(a[r].dv, b[r].dv));
  }
}

// Every rank of the ring records the same sequence of wait points (alltoall: each forward and
// backward step's Advance, each backward step's AddBlockGrad, FinishGrads; allgather: the two
// passes' gathers and the reduce-scatter), and the ring's exposed transfer is the same on every
// rank and no more than any rank's ring wait.
TEST(RingAttentionMethods, RanksRecordTheSameWaitPointsAndOneExposedTransfer) {
  const SmallInputs in = RandomSmallInputs(5);
  for (const RotateMethod rotate : {RotateMethod::kAllToAll, RotateMethod::kAllGather}) {
    SCOPED_TRACE(ChoiceName(rotate));
    const int64_t cp = 3;
    const auto results = RunSmallRing(rotate, in);
    const size_t points = rotate == RotateMethod::kAllToAll ? size_t(3 * cp + 1) : 3u;
    double sum_of_least = 0;
    for (size_t i = 0; i < points; ++i) {
      double least = INFINITY;
      for (const RankResult& r : results) {
        ASSERT_EQ(r.ring_waits.size(), points);
        least = std::min(least, r.ring_waits[i]);
      }
      sum_of_least += least;
    }
    for (const RankResult& r : results) {
      EXPECT_DOUBLE_EQ(r.exposed_transfer, sum_of_least);
      EXPECT_GE(r.exposed_transfer, 0);
      EXPECT_LE(r.exposed_transfer, r.ring_wait_seconds + 1e-12);
      double sum = 0;
      for (double w : r.ring_waits) sum += w;
      EXPECT_NEAR(sum, r.ring_wait_seconds, 1e-9);
    }
  }
}

TEST(CpShardTest, HeadTailAndNoneLayouts) {
  EXPECT_EQ(ShardPositions(8, 2, 0, LoadBalancer::kHeadTail), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(ShardPositions(8, 2, 1, LoadBalancer::kHeadTail), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(ShardPositions(8, 2, 1, LoadBalancer::kNone), (std::vector<int64_t>{4, 5, 6, 7}));
  const auto inputs = torch::arange(16).view({2, 8});
  const auto labels = inputs + 100;
  const ShardedBatch s = CpShard(inputs, labels, 4, 1, LoadBalancer::kHeadTail);
  EXPECT_EQ(s.positions.positions, (std::vector<int64_t>{1, 6}));
  EXPECT_TRUE(torch::equal(s.inputs, torch::tensor({1, 6, 9, 14}).view({2, 2})));
  EXPECT_TRUE(torch::equal(s.labels, s.inputs + 100));
}

TEST(MeshTest, CpInnermost) {
  Mesh m{5, 8, 2, 4};
  EXPECT_EQ(m.dp_rank(), 1);
  EXPECT_EQ(m.cp_rank(), 1);
  EXPECT_EQ(m.CpGroupRanks(), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(m.DpGroupRanks(), (std::vector<int64_t>{1, 5}));
}

}  // namespace
}  // namespace ringtrain
