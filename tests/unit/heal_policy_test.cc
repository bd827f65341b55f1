// The heal-or-restart decision (coordinator/heal_policy.h), without a cluster.
#include "coordinator/heal_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

// cp 2 on 3 workers, rank 1 (on w1) lost, snapshots every 3 steps, step 6 committed.
HealInputs Healable() {
  HealInputs in;
  in.memory_interval = 3;
  in.snapshot_step = 6;
  in.running = true;
  in.restarts_left = true;
  in.lost_rank = 1;
  in.lost_worker_id = "w1";
  in.world = 2;
  in.buddy_offset = 1;  // as the trainers' records say
  in.idle_workers = {"w1", "w2"};
  return in;
}

TEST(HealPolicyTest, HealsOnAnotherIdleWorkerWhenThereIsOne) {
  const HealDecision d = DecideHeal(Healable());
  EXPECT_TRUE(d.heal);
  EXPECT_EQ(d.replacement_worker_id, "w2");
}

TEST(HealPolicyTest, TheLostRanksOwnWorkerWhenItIsTheOnlyIdleOne) {
  HealInputs in = Healable();
  in.idle_workers = {"w1"};  // its trainer was killed; its agent lives on
  const HealDecision d = DecideHeal(in);
  EXPECT_TRUE(d.heal);
  EXPECT_EQ(d.replacement_worker_id, "w1");
}

TEST(HealPolicyTest, FallsBackToStorageSayingWhy) {
  const auto why = [](auto change) {
    HealInputs in = Healable();
    change(in);
    const HealDecision d = DecideHeal(in);
    EXPECT_FALSE(d.heal);
    return d.why_not;
  };
  EXPECT_THAT(why([](HealInputs& in) { in.memory_interval = 0; }), HasSubstr("snapshots are off"));
  EXPECT_THAT(why([](HealInputs& in) { in.snapshot_step = 0; }),
              HasSubstr("no in-memory snapshot"));
  EXPECT_THAT(why([](HealInputs& in) { in.buddy_offset = 0; }), HasSubstr("no in-memory snapshot"));
  EXPECT_THAT(why([](HealInputs& in) { in.restarts_left = false; }), HasSubstr("no restarts left"));
  EXPECT_THAT(why([](HealInputs& in) { in.running = false; }), HasSubstr("had not started"));
  EXPECT_THAT(why([](HealInputs& in) { in.healing = true; }), HasSubstr("previous heal"));
  EXPECT_THAT(why([](HealInputs& in) { in.idle_workers.clear(); }), HasSubstr("no idle worker"));
  // Rank 1's buddy in a world of 2 is rank 0: both gone.
  EXPECT_THAT(why([](HealInputs& in) { in.also_gone = {0}; }),
              HasSubstr("buddy, rank 0, which holds its snapshot, is gone too"));
}

TEST(HealPolicyTest, AnotherRankGoneThatIsNotTheBuddyAlsoFallsBack) {
  // dp 2 × cp 2: rank 1's buddy is rank 3; rank 2 gone as well.
  HealInputs in = Healable();
  in.world = 4;
  in.buddy_offset = 2;
  in.also_gone = {2};
  const HealDecision d = DecideHeal(in);
  EXPECT_FALSE(d.heal);
  EXPECT_THAT(d.why_not, HasSubstr("rank 2 is gone too"));
  in.also_gone.clear();
  EXPECT_TRUE(DecideHeal(in).heal);
}

TEST(HealPolicyTest, TheBuddyIsTheOneTheTrainersReport) {
  // dp 2 × cp 2 with the replicas interleaved over two hosts: the trainers chose offset 1, so
  // rank 1's copy is on rank 2 — rank 3 gone does not stop the heal's source, rank 2 gone does.
  HealInputs in = Healable();
  in.world = 4;
  in.buddy_offset = 1;
  in.also_gone = {2};
  EXPECT_THAT(DecideHeal(in).why_not, HasSubstr("buddy, rank 2, which holds its snapshot"));
  in.buddy_offset = 2;
  EXPECT_THAT(DecideHeal(in).why_not, HasSubstr("rank 2 is gone too"));
}

}  // namespace
}  // namespace ringtrain
