// Straggler detection (worker/trainer/straggler.h): who is named, when, with what ratio; work the
// load balancer gave a rank on purpose is not slowness.
#include "worker/trainer/straggler.h"

#include <gtest/gtest.h>

#include <vector>

namespace ringtrain {
namespace {

// Ranks that each computed `compute[r]` seconds of the step (no attention figures).
std::vector<RankFigures> Step(const std::vector<double>& compute) {
  std::vector<RankFigures> ranks(compute.size());
  for (size_t r = 0; r < compute.size(); ++r) {
    ranks[r].rank = int64_t(r);
    ranks[r].compute_seconds = compute[r];
  }
  return ranks;
}

TEST(StragglerDetectorTest, ARankSlowForTheWholeWindowIsNamedWithTheMedianRatio) {
  StragglerDetector detector(/*window=*/3, /*threshold=*/1.25);
  EXPECT_FALSE(detector.Observe(Step({1.0, 2.0, 1.0, 1.0})));  // 1 of 3 steps
  EXPECT_FALSE(detector.Observe(Step({1.0, 1.5, 1.0, 1.0})));  // 2 of 3
  const std::optional<Straggler> named = detector.Observe(Step({1.0, 1.8, 1.0, 1.0}));
  ASSERT_TRUE(named);
  EXPECT_EQ(named->rank, 1);
  EXPECT_DOUBLE_EQ(named->ratio, 1.8);  // the median of 2.0, 1.5, 1.8
  EXPECT_DOUBLE_EQ(named->seconds, 1.8);
  EXPECT_DOUBLE_EQ(named->peer_seconds, 1.0);
  // It stays named while it is slow in any of the last `window` steps, with the median of those
  // steps' ratios; `window` steps within the threshold clear it.
  EXPECT_TRUE(detector.Observe(Step({1.0, 1.6, 1.0, 1.0})));
  const std::optional<Straggler> still = detector.Observe(Step({1.0, 1.1, 1.0, 1.0}));
  ASSERT_TRUE(still);
  EXPECT_EQ(still->rank, 1);
  EXPECT_DOUBLE_EQ(still->ratio, (1.8 + 1.6) / 2);
  EXPECT_DOUBLE_EQ(still->seconds, 1.1);
  EXPECT_TRUE(detector.Observe(Step({1.0, 1.1, 1.0, 1.0})));
  EXPECT_FALSE(detector.Observe(Step({1.0, 1.1, 1.0, 1.0})));
  EXPECT_FALSE(detector.Observe(Step({1.0, 1.6, 1.0, 1.0})));
}

TEST(StragglerDetectorTest, AnotherRankSlowForTheWholeWindowTakesOver) {
  StragglerDetector detector(2, 1.25);
  detector.Observe(Step({1.0, 2.0, 1.0}));
  ASSERT_EQ(detector.Observe(Step({1.0, 2.0, 1.0}))->rank, 1);
  EXPECT_EQ(detector.Observe(Step({1.0, 1.0, 2.0}))->rank, 1);
  EXPECT_EQ(detector.Observe(Step({1.0, 1.0, 2.0}))->rank, 2);
}

TEST(StragglerDetectorTest, TheRatioIsOverTheMedianOfTheOthers) {
  StragglerDetector detector(1, 1.25);
  // The others 1.0, 1.2, 0.9, 1.3 → median 1.1; the slowest (rank 3, 3.0) is 3.0 / 1.1 of that.
  const std::optional<Straggler> named = detector.Observe(Step({1.0, 1.2, 0.9, 3.0, 1.3}));
  ASSERT_TRUE(named);
  EXPECT_EQ(named->rank, 3);
  EXPECT_DOUBLE_EQ(named->peer_seconds, (1.0 + 1.2) / 2);  // even count: the middle two
  EXPECT_DOUBLE_EQ(named->ratio, 3.0 / 1.1);
}

TEST(StragglerDetectorTest, ADifferentSlowRankEachStepNamesNoOne) {
  StragglerDetector detector(3, 1.25);
  for (int step = 0; step < 12; ++step) {
    std::vector<double> compute = {1.0, 1.0, 1.0};
    compute[size_t(step % 3)] = 2.0;
    EXPECT_FALSE(detector.Observe(Step(compute))) << "step " << step;
  }
}

TEST(StragglerDetectorTest, BalancedRanksWithNoiseBelowTheThresholdNameNoOne) {
  StragglerDetector detector(2, 1.25);
  for (int step = 0; step < 10; ++step) {
    EXPECT_FALSE(detector.Observe(Step({1.0, 1.2, 1.0 + 0.01 * step})));
  }
}

TEST(StragglerDetectorTest, OneRankOrNoTimeNamesNoOne) {
  StragglerDetector detector(1, 1.25);
  EXPECT_FALSE(detector.Observe(Step({5.0})));
  EXPECT_FALSE(detector.Observe(Step({})));
  EXPECT_FALSE(detector.Observe(Step({0.0, 1.0})));  // the others' median is 0: no ratio
}

TEST(StragglerDetectorTest, AttentionWorkGivenOnPurposeIsNotSlowness) {
  // Rank 1 was given 3× the attention pairs of rank 0 (balancer "none") and took 3× the attention
  // time at the same speed: scaled to the mean work, both computed the same.
  std::vector<RankFigures> ranks = Step({2.0, 4.0});
  ranks[0].attention_seconds = 1.0;
  ranks[0].attention_pairs = 100;
  ranks[1].attention_seconds = 3.0;
  ranks[1].attention_pairs = 300;
  const std::vector<double> seconds = ComputeSeconds(ranks);
  EXPECT_DOUBLE_EQ(seconds[0], 1.0 + 1.0 * 200 / 100);
  EXPECT_DOUBLE_EQ(seconds[1], 1.0 + 3.0 * 200 / 300);
  StragglerDetector detector(1, 1.25);
  EXPECT_FALSE(detector.Observe(ranks));
  // The same work at half the speed is slowness.
  ranks[1].compute_seconds = 8.0;
  ranks[1].attention_seconds = 6.0;
  const std::optional<Straggler> named = detector.Observe(ranks);
  ASSERT_TRUE(named);
  EXPECT_EQ(named->rank, 1);
  EXPECT_DOUBLE_EQ(named->ratio, (2.0 + 6.0 * 200 / 300) / 3.0);
}

}  // namespace
}  // namespace ringtrain
