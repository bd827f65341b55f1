// PlanFusedCalls: how a causal block is cut into full / aligned-causal calls for the fused kernels.
// The ring's blocks under both layouts must be the few calls the header promises, and for any
// positions the calls must cover every visible (query, key) pair exactly once and no hidden one.
#include "worker/engine/kernels/block_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "worker/engine/parallel/mesh.h"

namespace ringtrain {
namespace {

// How many calls see each (query, key) pair under their own mask; must be 1 where p_k <= p_q, else
// 0.
void ExpectExactCover(const std::vector<int64_t>& qp, const std::vector<int64_t>& kp,
                      const std::vector<FusedCall>& calls) {
  std::vector<std::vector<int>> seen(qp.size(), std::vector<int>(kp.size(), 0));
  for (const FusedCall& c : calls) {
    ASSERT_LE(0, c.q.begin);
    ASSERT_LE(c.q.end, int64_t(qp.size()));
    ASSERT_LE(0, c.k.begin);
    ASSERT_LE(c.k.end, int64_t(kp.size()));
    ASSERT_GT(c.q.size(), 0);
    ASSERT_GT(c.k.size(), 0);
    if (c.causal) {
      ASSERT_EQ(c.q.size(), c.k.size()) << DescribePlan(calls);
    }
    for (int64_t i = c.q.begin; i < c.q.end; ++i) {
      for (int64_t j = c.k.begin; j < c.k.end; ++j) {
        // The fused kernel's own mask: aligned triangle (local offsets) or none.
        if (c.causal && (j - c.k.begin) > (i - c.q.begin)) continue;
        ++seen[i][j];
      }
    }
  }
  for (size_t i = 0; i < qp.size(); ++i) {
    for (size_t j = 0; j < kp.size(); ++j) {
      ASSERT_EQ(seen[i][j], kp[j] <= qp[i] ? 1 : 0)
          << "query " << i << " (position " << qp[i] << "), key " << j << " (position " << kp[j]
          << "): " << DescribePlan(calls);
    }
  }
}

TEST(BlockPlanTest, HeadTailRingBlocksAreOneCallEach) {
  for (int64_t cp : {2, 4, 8}) {
    const int64_t seq = 16 * cp, chunk = 8;
    for (int64_t r = 0; r < cp; ++r) {
      const auto qp = ShardPositions(seq, cp, r, LoadBalancer::kHeadTail);
      for (int64_t src = 0; src < cp; ++src) {
        const auto kp = ShardPositions(seq, cp, src, LoadBalancer::kHeadTail);
        const auto plan = PlanFusedCalls(qp, kp, true);
        ASSERT_TRUE(plan.has_value());
        ExpectExactCover(qp, kp, *plan);
        ASSERT_EQ(plan->size(), 1u)
            << "cp " << cp << " rank " << r << " block of " << src << ": " << DescribePlan(*plan);
        const FusedCall& c = (*plan)[0];
        if (src == r) {
          EXPECT_EQ(c, (FusedCall{{0, 2 * chunk}, {0, 2 * chunk}, true}));
        } else if (src < r) {  // an earlier rank: every query sees its head chunk
          EXPECT_EQ(c, (FusedCall{{0, 2 * chunk}, {0, chunk}, false}));
        } else {  // a later rank: only the tail queries, and they see all of it
          EXPECT_EQ(c, (FusedCall{{chunk, 2 * chunk}, {0, 2 * chunk}, false}));
        }
      }
    }
  }
}

TEST(BlockPlanTest, ContiguousShardsAreCausalFullOrNothing) {
  const int64_t cp = 4, seq = 64;
  for (int64_t r = 0; r < cp; ++r) {
    const auto qp = ShardPositions(seq, cp, r, LoadBalancer::kNone);
    for (int64_t src = 0; src < cp; ++src) {
      const auto kp = ShardPositions(seq, cp, src, LoadBalancer::kNone);
      const auto plan = PlanFusedCalls(qp, kp, true);
      ASSERT_TRUE(plan.has_value());
      ExpectExactCover(qp, kp, *plan);
      EXPECT_EQ(plan->size(), src > r ? 0u : 1u) << DescribePlan(*plan);
      if (src <= r) {
        EXPECT_EQ((*plan)[0].causal, src == r);
      }
    }
  }
}

TEST(BlockPlanTest, AnyPositionsAreCoveredExactlyOnce) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    // A few runs of consecutive positions, in any order, possibly overlapping between q and k.
    auto draw = [&] {
      std::vector<int64_t> p;
      const int runs = 1 + int(rng() % 4);
      for (int i = 0; i < runs; ++i) {
        const int64_t start = int64_t(rng() % 40), len = 1 + int64_t(rng() % 9);
        for (int64_t x = start; x < start + len; ++x) {
          if (std::find(p.begin(), p.end(), x) == p.end()) p.push_back(x);
        }
      }
      if (rng() % 2) std::sort(p.begin(), p.end());
      return p;
    };
    const auto qp = draw(), kp = draw();
    const auto plan = PlanFusedCalls(qp, kp, true);
    ASSERT_TRUE(plan.has_value());
    ExpectExactCover(qp, kp, *plan);
  }
}

TEST(BlockPlanTest, NoMaskIsOneFullCall) {
  const std::vector<int64_t> qp = {5, 1, 9}, kp = {30, 2};
  const auto plan = PlanFusedCalls(qp, kp, false);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(*plan, (std::vector<FusedCall>{{{0, 3}, {0, 2}, false}}));
}

TEST(BlockPlanTest, ScatteredPositionsAreLeftToTheTiledKernel) {
  std::vector<int64_t> qp, kp;
  for (int64_t i = 0; i < 40; ++i) {
    qp.push_back(4 * i + 1);  // no two consecutive: 40 runs each side
    kp.push_back(4 * i);
  }
  EXPECT_FALSE(PlanFusedCalls(qp, kp, true).has_value());
}

}  // namespace
}  // namespace ringtrain
