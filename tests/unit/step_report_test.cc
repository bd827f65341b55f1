// Step records: the JSONL contract with the agent and loss-compare (exact float round trip, field
// names and order, per-rank figures), the human line, and the writer's append/truncate.
#include "worker/trainer/step_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(JsonRecordTest, FloatsRoundTripExactly) {
  for (const double v : {0.1, 1.0 / 3.0, 6.02214076e23, -2.5e-300, 4.9406564584124654e-324}) {
    const nlohmann::json j = nlohmann::json::parse(JsonRecord().Add("x", v).str());
    EXPECT_EQ(j["x"].get<double>(), v) << FormatDouble17(v);
  }
}

TEST(JsonRecordTest, NonFiniteIsNullAndStringsAreEscaped) {
  const std::string text = JsonRecord()
                               .Add("nan", std::nan(""))
                               .Add("inf", std::numeric_limits<double>::infinity())
                               .Add("s", std::string("a\"b\\c\nd\x01"))
                               .Add("n", int64_t{-7})
                               .str();
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_TRUE(j["nan"].is_null());
  EXPECT_TRUE(j["inf"].is_null());
  EXPECT_EQ(j["s"], "a\"b\\c\nd\x01");
  EXPECT_EQ(j["n"], -7);
}

StepReport SampleReport() {
  StepReport r;
  r.step = 3;
  r.total_steps = 10;
  r.loss = 5.25;
  r.grad_norm = 0.75;
  r.lr = 8e-4;
  r.tokens_per_second = 1234.5;
  r.step_seconds = 0.25;
  r.tokens = 4096;
  r.peak_memory_bytes = 3 << 20;
  r.elapsed_seconds = 1.5;
  return r;
}

TEST(StepReportTest, JsonHasTheContractFieldsInOrder) {
  const std::string text = StepReportJson(SampleReport());
  EXPECT_EQ(text.find("\"step\""), 1u);
  const nlohmann::json j = nlohmann::json::parse(text);
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  // nlohmann sorts keys; the order on the wire is checked through find() positions instead.
  EXPECT_EQ(j.size(), 20u);
  size_t last = 0;
  for (const char* key : {"\"step\"",
                          "\"loss\"",
                          "\"grad_norm\"",
                          "\"lr\"",
                          "\"tokens_per_second\"",
                          "\"step_seconds\"",
                          "\"tokens\"",
                          "\"peak_memory_bytes\"",
                          "\"device_memory_peak_bytes\"",
                          "\"elapsed_seconds\"",
                          "\"checkpoint_stall_seconds\"",
                          "\"checkpoint_write_seconds\"",
                          "\"attention_imbalance\"",
                          "\"straggler_rank\"",
                          "\"straggler_ratio\"",
                          "\"snapshot_step\"",
                          "\"snapshot_buddy_offset\"",
                          "\"generation\"",
                          "\"checkpoint_save_step\"",
                          "\"checkpoint_commit_step\""}) {
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    EXPECT_GE(at, last) << key;
    last = at;
  }
  EXPECT_EQ(j["loss"], 5.25);
  EXPECT_EQ(j["tokens"], 4096);
  EXPECT_FALSE(j.contains("ranks"));
}

TEST(StepReportTest, RankFiguresRoundTripThroughDoublesAndJson) {
  const RankFigures a{0,      0.5,     0.25,  0.125, 1 << 20, 7 << 20, 0.0625, int64_t(5) << 30,
                      123456, 1 << 19, 0.375, 9,     0.03125};
  const RankFigures b = RankFiguresFromDoubles(RankFiguresToDoubles(a), 1).value();
  EXPECT_EQ(b.attention_seconds, a.attention_seconds);
  EXPECT_EQ(b.attention_cpu_seconds, a.attention_cpu_seconds);
  EXPECT_EQ(b.comm_wait_seconds, a.comm_wait_seconds);
  EXPECT_EQ(b.bytes_sent, a.bytes_sent);
  EXPECT_EQ(b.peak_memory_bytes, a.peak_memory_bytes);
  EXPECT_EQ(b.ring_wait_seconds, a.ring_wait_seconds);
  EXPECT_EQ(b.device_memory_peak_bytes, a.device_memory_peak_bytes);
  EXPECT_EQ(b.attention_pairs, a.attention_pairs);
  EXPECT_EQ(b.ring_bytes_sent, a.ring_bytes_sent);
  EXPECT_EQ(b.compute_seconds, a.compute_seconds);
  EXPECT_EQ(b.snapshot_held_step, a.snapshot_held_step);
  EXPECT_EQ(b.ring_transfer_exposed_seconds, a.ring_transfer_exposed_seconds);

  const nlohmann::json j = nlohmann::json::parse(StepReportJson(SampleReport(), {a, b}));
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][1]["rank"], 1);
  EXPECT_EQ(j["ranks"][0]["bytes_sent"], 1 << 20);
  EXPECT_TRUE(j["ranks"][0]["bytes_sent"].is_number_integer());
  EXPECT_TRUE(j["ranks"][0]["peak_memory_bytes"].is_number_integer());
  EXPECT_EQ(j["ranks"][0]["ring_wait_seconds"], 0.0625);
  EXPECT_EQ(j["ranks"][0]["device_memory_peak_bytes"], int64_t(5) << 30);
  EXPECT_EQ(j["ranks"][0]["attention_pairs"], 123456);
  EXPECT_EQ(j["ranks"][0]["ring_bytes_sent"], 1 << 19);
  EXPECT_EQ(j["ranks"][0]["compute_seconds"], 0.375);
  EXPECT_EQ(j["ranks"][0]["snapshot_held_step"], 9);
  EXPECT_EQ(j["ranks"][0]["ring_transfer_exposed_seconds"], 0.03125);
  EXPECT_EQ(j["ranks"][0].size(), 13u);  // "rank" and the 12 figures
  EXPECT_EQ(j["straggler_rank"], -1);    // none named
  EXPECT_EQ(j["straggler_ratio"], 0.0);
}

TEST(StepReportTest, LineShowsStepOfTotalAndFigures) {
  const std::string line = StepReportLine(SampleReport());
  EXPECT_THAT(line, HasSubstr("step  3/10"));
  EXPECT_THAT(line, HasSubstr("loss  5.25000"));
  EXPECT_THAT(line, HasSubstr("mem     3 MiB"));
  EXPECT_THAT(line, Not(HasSubstr("device")));  // CPU ranks have no device memory
  StepReport cuda = SampleReport();
  cuda.device_memory_peak_bytes = int64_t(1536) << 20;
  EXPECT_THAT(StepReportLine(cuda), HasSubstr("device  1536 MiB"));
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(JsonlWriterTest, TruncatesOrAppendsAndWritesWholeLines) {
  testing::TempDir dir;
  const std::string path = dir / "m.jsonl";
  {
    JsonlWriter w;
    ASSERT_TRUE(w.Open(path, /*append=*/false).ok());
    ASSERT_TRUE(w.Write("{\"a\": 1}").ok());
    EXPECT_EQ(Slurp(path), "{\"a\": 1}\n");  // flushed at once
  }
  {
    JsonlWriter w;
    ASSERT_TRUE(w.Open(path, /*append=*/true).ok());
    ASSERT_TRUE(w.Write("{\"a\": 2}").ok());
  }
  EXPECT_EQ(Slurp(path), "{\"a\": 1}\n{\"a\": 2}\n");
  {
    JsonlWriter w;
    ASSERT_TRUE(w.Open(path, /*append=*/false).ok());
  }
  EXPECT_EQ(Slurp(path), "");
  JsonlWriter closed;
  EXPECT_TRUE(closed.Write("{}").ok());  // no file configured: nothing to write
  const absl::Status bad = closed.Open(dir / "missing/m.jsonl", false);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.message()), HasSubstr("missing/m.jsonl"));
}

}  // namespace
}  // namespace ringtrain
