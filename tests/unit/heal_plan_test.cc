// The arithmetic of healing in place: who holds whose snapshot, the heal instruction's wire form,
// and which step the ranks of a healed world roll back to.
#include "worker/trainer/heal_plan.h"

#include <set>

#include <gtest/gtest.h>

#include "common/record/heal_instruction.h"

namespace ringtrain {
namespace {

TEST(SnapshotBuddyTest, ABuddyIsAnotherRankAndEveryRankHoldsExactlyOneCopy) {
  for (int64_t world : {2, 3, 4, 6, 8}) {
    for (int64_t offset = 1; offset < world; ++offset) {
      std::set<int64_t> holders;
      for (int64_t r = 0; r < world; ++r) {
        const int64_t b = SnapshotBuddy(r, world, offset);
        EXPECT_NE(b, r) << "world " << world << " offset " << offset;
        EXPECT_EQ(SnapshotSource(b, world, offset), r);
        holders.insert(b);
      }
      EXPECT_EQ(int64_t(holders.size()), world);
    }
  }
  EXPECT_EQ(SnapshotBuddy(0, 1, 0), 0);
}

// Every rank on one host (a local cluster), or each on its own: no offset is better than another.
std::vector<uint64_t> OneHost(size_t world) { return std::vector<uint64_t>(world, 7); }
std::vector<uint64_t> OwnHosts(size_t world) {
  std::vector<uint64_t> hosts;
  for (size_t r = 0; r < world; ++r) hosts.push_back(100 + r);
  return hosts;
}

TEST(SnapshotOffsetTest, WithSeveralCpGroupsTheBuddyIsTheSamePlaceInTheNextGroup) {
  for (const auto& hosts : {OneHost(4), OwnHosts(4)}) {
    // dp 2 × cp 2: ranks 0, 1 are one replica, 2, 3 the other.
    const int64_t offset = SnapshotOffset(hosts, 2);
    EXPECT_EQ(offset, 2);
    EXPECT_EQ(SnapshotBuddy(1, 4, offset), 3);
    EXPECT_EQ(SnapshotBuddy(3, 4, offset), 1);
  }
  // One CP group: the next rank.
  EXPECT_EQ(SnapshotOffset(OneHost(2), 2), 1);
  EXPECT_EQ(SnapshotOffset(OwnHosts(3), 3), 1);
  EXPECT_EQ(SnapshotOffset(OneHost(1), 1), 0);
}

TEST(SnapshotOffsetTest, ACopyLeavesItsRanksHostWhenAnotherHostExists) {
  // cp 8 on two nodes of 4 ranks each: the next rank is on the same node; 4 ranks on is not.
  const std::vector<uint64_t> two_nodes = {1, 1, 1, 1, 2, 2, 2, 2};
  EXPECT_EQ(SnapshotOffset(two_nodes, 8), 4);
  // dp 2 × cp 2 with the replicas interleaved over two nodes: rank 2 shares rank 0's node.
  EXPECT_EQ(SnapshotOffset({1, 2, 1, 2}, 2), 1);
  // dp 4 × cp 2, each replica on one node of two: the next replica is on another node.
  EXPECT_EQ(SnapshotOffset({1, 1, 2, 2, 3, 3, 4, 4}, 2), 2);
  // dp 2 × cp 4 on two nodes of 4: the next replica, 4 ranks on, is the other node.
  EXPECT_EQ(SnapshotOffset(two_nodes, 4), 4);
  // Three ranks on one node, one on another: no offset avoids the node; the fewest shared.
  const std::vector<uint64_t> uneven = {1, 1, 1, 2};
  const int64_t offset = SnapshotOffset(uneven, 4);
  int64_t shared = 0;
  for (int64_t r = 0; r < 4; ++r) shared += uneven[size_t(r)] == uneven[size_t((r + offset) % 4)];
  EXPECT_EQ(shared, 2);
}

TEST(HealInstructionTest, RoundTripsAndRefusesWhatIsWrong) {
  HealInstruction h;
  h.generation = 2;
  h.master_addr = "10.0.0.5";
  h.master_port = 29517;
  const absl::StatusOr<HealInstruction> back = ParseHealInstruction(h.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->generation, 2);
  EXPECT_EQ(back->master_addr, "10.0.0.5");
  EXPECT_EQ(back->master_port, 29517);
  for (const char* bad :
       {"", "[]", "{\"generation\": 0, \"master_addr\": \"a\", \"master_port\": 1}",
        "{\"generation\": 1, \"master_addr\": \"\", \"master_port\": 1}",
        "{\"generation\": 1, \"master_addr\": \"a\", \"master_port\": 70000}",
        "{\"generation\": 1, \"master_addr\": \"a\""}) {
    const absl::StatusOr<HealInstruction> parsed = ParseHealInstruction(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

HealRow Survivor(std::vector<int64_t> own, std::vector<int64_t> held) {
  HealRow row;
  row.survivor = true;
  row.own_steps = std::move(own);
  row.held_steps = std::move(held);
  return row;
}

TEST(ChooseRollbackStepTest, TheNewestStepEveryRankCanRestore) {
  // cp 2, world 2: rank 1 lost; rank 0 holds its copies of 3 and 6, its own 6 and 9 (9's
  // transfer did not finish).
  const std::vector<HealRow> rows = {Survivor({6, 9}, {3, 6}), HealRow{}};
  EXPECT_EQ(ChooseRollbackStep(rows, /*offset=*/1), 6);
}

TEST(ChooseRollbackStepTest, NoHealWithoutASnapshotOrWithoutTheLostRanksBuddy) {
  EXPECT_EQ(ChooseRollbackStep({Survivor({}, {}), HealRow{}}, 1), std::nullopt);
  // dp 2 × cp 2: rank 1 and its buddy, rank 3, both lost.
  const std::vector<HealRow> both = {Survivor({6}, {6}), HealRow{}, Survivor({6}, {6}), HealRow{}};
  EXPECT_EQ(ChooseRollbackStep(both, 2), std::nullopt);
  // Only rank 1 lost: rank 3 holds its copy.
  const std::vector<HealRow> one = {Survivor({6}, {6}), HealRow{}, Survivor({6}, {6}),
                                    Survivor({6}, {6})};
  EXPECT_EQ(ChooseRollbackStep(one, 2), 6);
}

TEST(ChooseRollbackStepTest, SurvivorsThatSawDifferentStepsAgreeOnTheOlderOne) {
  // Rank 0 committed 9 and pruned 6; rank 2 still has 6 and 9; rank 1's copy on rank 2 is 9.
  const std::vector<HealRow> rows = {Survivor({9}, {9}), HealRow{}, Survivor({6, 9}, {6, 9})};
  EXPECT_EQ(ChooseRollbackStep(rows, 1), 9);
  const std::vector<HealRow> older = {Survivor({6}, {6}), HealRow{}, Survivor({6, 9}, {6, 9})};
  EXPECT_EQ(ChooseRollbackStep(older, 1), 6);
}

TEST(RunBuddyOffsetTest, TheSurvivorsOffset) {
  HealRow survivor = Survivor({6}, {6});
  survivor.buddy_offset = 4;
  EXPECT_EQ(RunBuddyOffset({HealRow{}, survivor}), 4);
  EXPECT_EQ(RunBuddyOffset({HealRow{}, HealRow{}}), std::nullopt);
}

TEST(HealRowTest, RoundTripsThroughDoubles) {
  HealRow row = Survivor({3, 6}, {6});
  row.flat_elements = 12345;
  row.rng_bytes = 5056;
  row.tag_pid = 77;
  row.tag_ms = 1.7e12;
  row.buddy_offset = 2;
  row.host_id = double((uint64_t{1} << 48) - 3);  // HostId's widest
  const absl::StatusOr<HealRow> back = HealRowFromDoubles(HealRowToDoubles(row));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->survivor);
  EXPECT_EQ(back->own_steps, (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(back->held_steps, (std::vector<int64_t>{6}));
  EXPECT_EQ(back->flat_elements, 12345);
  EXPECT_EQ(back->tag_ms, 1.7e12);
  EXPECT_EQ(back->buddy_offset, 2);
  EXPECT_EQ(back->host_id, double((uint64_t{1} << 48) - 3));
  EXPECT_FALSE(HealRowFromDoubles({1, 2}).ok());
}

}  // namespace
}  // namespace ringtrain
