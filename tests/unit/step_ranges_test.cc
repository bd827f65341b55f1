// The steps a job's store lacks, as ranges, and their names in messages.
#include "coordinator/step_ranges.h"

#include <gtest/gtest.h>

namespace ringtrain {
namespace {

using Ranges = std::vector<StepRange>;

TEST(StepRangesTest, MissingStepsAreTheGapsOfOneToTotal) {
  EXPECT_EQ(MissingSteps({1, 2, 3}, 3), Ranges{});
  EXPECT_EQ(MissingSteps({}, 4), (Ranges{{1, 4}}));
  EXPECT_EQ(MissingSteps({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, 40),
            (Ranges{{16, 40}}));
  EXPECT_EQ(MissingSteps({2, 3, 3, 6, 9}, 10), (Ranges{{1, 1}, {4, 5}, {7, 8}, {10, 10}}));
  // Steps outside 1..total (which the coordinator never stores) change nothing.
  EXPECT_EQ(MissingSteps({0, 1, 5, 11}, 5), (Ranges{{2, 4}}));
}

// A job resumed from another job's checkpoint of step 4 computes steps 5.. only.
TEST(StepRangesTest, MissingFromAFirstStep) {
  EXPECT_EQ(MissingSteps({5, 6, 8}, 8, 5), (Ranges{{7, 7}}));
  EXPECT_TRUE(MissingSteps({5, 6, 7, 8}, 8, 5).empty());
  EXPECT_EQ(MissingSteps({}, 8, 5), (Ranges{{5, 8}}));
}

TEST(StepRangesTest, DescriptionsStayShort) {
  EXPECT_EQ(DescribeSteps({}), "no steps");
  EXPECT_EQ(DescribeSteps({{7, 7}}), "step 7");
  EXPECT_EQ(DescribeSteps({{16, 40}}), "steps 16-40");
  EXPECT_EQ(DescribeSteps({{3, 3}, {7, 9}, {12, 12}}), "steps 3, 7-9 and 12");
  Ranges scattered;
  for (int64_t s = 2; s <= 40; s += 2) scattered.push_back({s, s});  // 20 single steps
  EXPECT_EQ(DescribeSteps(scattered), "steps 2, 4, 6, 8, 10 and 15 more steps");
  EXPECT_EQ(CountSteps(scattered), 20);
}

}  // namespace
}  // namespace ringtrain
