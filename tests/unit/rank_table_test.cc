// ringctl top's table (client/rank_table.h) from step records: rows, CP groups, imbalance, the
// slowest rank, the JSON.
#include "client/rank_table.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ringtrain {
namespace {

// A record as the trainer writes it (step_report.cc), ranks out of order on purpose.
constexpr char kRecord[] =
    R"({"step": 7, "loss": 4.5, "step_seconds": 0.25, "ranks": [)"
    R"({"rank": 1, "attention_seconds": 0.04, "attention_cpu_seconds": 0.05, "comm_wait_seconds": 0.01, "bytes_sent": 2048, "peak_memory_bytes": 1048576, "ring_wait_seconds": 0.002, "device_memory_peak_bytes": 0, "ring_transfer_exposed_seconds": 0.0005},)"
    R"({"rank": 0, "attention_seconds": 0.02, "attention_cpu_seconds": 0.02, "comm_wait_seconds": 0.03, "bytes_sent": 1024, "peak_memory_bytes": 2097152, "ring_wait_seconds": 0.001, "device_memory_peak_bytes": 0},)"
    R"({"rank": 2, "attention_seconds": 0.05, "attention_cpu_seconds": 0.05, "comm_wait_seconds": 0.0, "bytes_sent": 512, "peak_memory_bytes": 1048576, "ring_wait_seconds": 0.0, "device_memory_peak_bytes": 0},)"
    R"({"rank": 3, "attention_seconds": 0.01, "attention_cpu_seconds": 0.01, "comm_wait_seconds": 0.04, "bytes_sent": 512, "peak_memory_bytes": 1048576, "ring_wait_seconds": 0.003, "device_memory_peak_bytes": 0}]})";

TEST(RankTableTest, RowsGroupsImbalanceAndSlowest) {
  absl::StatusOr<RankTable> table = RankTableFromRecord(kRecord, 2);  // dp 2 x cp 2
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->step, 7);
  EXPECT_DOUBLE_EQ(table->step_seconds, 0.25);
  ASSERT_EQ(table->rows.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(table->rows[r].rank, r);
  EXPECT_EQ(table->rows[1].cp_group, 0);
  EXPECT_EQ(table->rows[2].cp_group, 1);
  EXPECT_DOUBLE_EQ(table->rows[1].attention_seconds, 0.04);
  EXPECT_DOUBLE_EQ(table->rows[1].comm_wait_seconds, 0.01);
  EXPECT_DOUBLE_EQ(table->rows[1].ring_wait_seconds, 0.002);
  EXPECT_DOUBLE_EQ(table->rows[1].ring_transfer_exposed_seconds, 0.0005);
  EXPECT_DOUBLE_EQ(table->rows[0].ring_transfer_exposed_seconds, 0);  // an older record: 0
  EXPECT_DOUBLE_EQ(table->rows[1].bytes_sent, 2048);
  EXPECT_DOUBLE_EQ(table->rows[0].peak_memory_bytes, 2097152);
  ASSERT_EQ(table->groups.size(), 2u);
  EXPECT_EQ(table->groups[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(table->groups[0].imbalance, 0.04 / 0.02);
  EXPECT_DOUBLE_EQ(table->groups[1].imbalance, 0.05 / 0.01);
  EXPECT_EQ(table->slowest_rank, 2);
  EXPECT_TRUE(table->rows[2].slowest);
  EXPECT_FALSE(table->rows[1].slowest);

  EXPECT_EQ(table->rows[3].cp_rank, 1);
  const std::string text = FormatRankTable(*table);
  EXPECT_NE(text.find("<- slowest"), std::string::npos) << text;
  // Each rank's CP group, and its place in the group ("1/2": rank 1 of the group's 2).
  EXPECT_EQ(text.rfind("RANK  GROUP CP ", 0), 0u) << text;
  EXPECT_NE(text.find("\n3     1     1/2  "), std::string::npos) << text;
  EXPECT_NE(text.find(" RING WAIT  RING XFER "), std::string::npos) << text;
  EXPECT_NE(text.find("    0.0020     0.0005 "), std::string::npos) << text;  // rank 1
  EXPECT_NE(text.find("\n2     1     0/2  "), std::string::npos) << text;
  EXPECT_NE(text.find("cp group 1: attention max/min 5.000"), std::string::npos) << text;

  const nlohmann::json json = nlohmann::json::parse(RankTableJson("job-000007", *table));
  EXPECT_EQ(json["job_id"], "job-000007");
  EXPECT_EQ(json["step"], 7);
  EXPECT_EQ(json["slowest_rank"], 2);
  ASSERT_EQ(json["ranks"].size(), 4u);
  EXPECT_DOUBLE_EQ(json["ranks"][3]["comm_wait_seconds"].get<double>(), 0.04);
  EXPECT_DOUBLE_EQ(json["ranks"][1]["ring_transfer_exposed_seconds"].get<double>(), 0.0005);
  EXPECT_EQ(json["ranks"][3]["cp_rank"], 1);
  EXPECT_DOUBLE_EQ(json["cp_groups"][0]["imbalance"].get<double>(), 2.0);
}

// attention_pairs (the work the load balancer planned per rank) gives each CP group's max/mean.
TEST(RankTableTest, WorkImbalanceIsMaxOverMeanOfVisiblePairs) {
  absl::StatusOr<RankTable> table = RankTableFromRecord(
      R"({"step": 2, "ranks": [{"rank": 0, "attention_seconds": 0.1, "attention_pairs": 300},)"
      R"({"rank": 1, "attention_seconds": 0.1, "attention_pairs": 100}]})",
      2);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_DOUBLE_EQ(table->groups[0].work_imbalance, 300.0 / 200.0);
  EXPECT_NE(FormatRankTable(*table).find("work max/mean 1.500"), std::string::npos)
      << FormatRankTable(*table);
  const nlohmann::json json = nlohmann::json::parse(RankTableJson("job-000002", *table));
  EXPECT_DOUBLE_EQ(json["cp_groups"][0]["work_imbalance"].get<double>(), 1.5);
  // kRecord holds no work: no figure.
  absl::StatusOr<RankTable> none = RankTableFromRecord(kRecord, 2);
  EXPECT_EQ(none->groups[0].work_imbalance, 0);
  EXPECT_EQ(FormatRankTable(*none).find("work max/mean"), std::string::npos);
}

TEST(RankTableTest, ZeroAttentionHasNoImbalanceFigure) {
  absl::StatusOr<RankTable> table = RankTableFromRecord(
      R"({"step": 1, "ranks": [{"rank": 0, "attention_seconds": 0}, {"rank": 1, "attention_seconds": 0.1}]})",
      2);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->groups[0].imbalance, 0);
  EXPECT_NE(FormatRankTable(*table).find("max/min -"), std::string::npos);
}

TEST(RankTableTest, RecordsWithoutRanksAreRefused) {
  EXPECT_TRUE(
      absl::IsInvalidArgument(RankTableFromRecord(R"({"step": 1, "loss": 2})", 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(RankTableFromRecord("not json", 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(RankTableFromRecord(R"({"ranks": []})", 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(RankTableFromRecord(kRecord, 0).status()));
}

}  // namespace
}  // namespace ringtrain
