// The step record contract (common/record/step_record.h): what the trainer writes is what every
// reader parses, exactly (17-digit floats), in the wire order, with the reading rules for missing
// and non-numeric figures.
#include "common/record/step_record.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ringtrain {
namespace {

StepRecord Sample() {
  StepRecord r;
  r.step = 3;
  r.loss = 1.0 / 3.0;
  r.grad_norm = 0.75;
  r.lr = 8e-4;
  r.tokens_per_second = 1234.5;
  r.step_seconds = 0.25;
  r.tokens = 4096;
  r.peak_memory_bytes = 65712324608.0;
  r.elapsed_seconds = 1.5;
  for (int i = 0; i < 2; ++i) {
    RankFigures f;
    f.attention_seconds = 0.1 * (i + 1);
    f.bytes_sent = 1 << 20;
    f.ring_wait_seconds = 2.5e-300;
    r.ranks.push_back(f);
  }
  return r;
}

TEST(StepRecordTest, RoundTripsExactlyInWireOrder) {
  const StepRecord r = Sample();
  const std::string json = r.ToJson();
  EXPECT_EQ(json.rfind("{\"step\": 3, \"loss\": 0.33333333333333331, ", 0), 0u) << json;
  EXPECT_NE(json.find("\"tokens\": 4096, \"peak_memory_bytes\": 65712324608, "), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"ranks\": [{\"rank\": 0, \"attention_seconds\": 0.10000000000000001"),
            std::string::npos)
      << json;
  auto parsed = ParseStepRecord(json, MissingFigure::kZero);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->has_value());
  const StepRecord& back = **parsed;
  EXPECT_EQ(back.step, 3);
  for (const auto& f : kStepFields) EXPECT_EQ(back.*f.member, r.*f.member) << f.name;
  ASSERT_EQ(back.ranks.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back.ranks[i].rank, static_cast<int64_t>(i));
    for (const auto& f : kRankFields) EXPECT_EQ(back.ranks[i].*f.member, r.ranks[i].*f.member);
  }
  EXPECT_EQ(back.ToJson(), json);
}

TEST(StepRecordTest, RankFiguresTravelAsOneVectorOfDoubles) {
  const RankFigures f = Sample().ranks[1];
  const std::vector<double> values = RankFiguresToDoubles(f);
  EXPECT_EQ(values.size(), kRankFields.size());
  auto back = RankFiguresFromDoubles(values, 5);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->rank, 5);
  EXPECT_EQ(back->attention_seconds, f.attention_seconds);
  EXPECT_EQ(back->bytes_sent, f.bytes_sent);
  EXPECT_EQ(RankFiguresFromDoubles({1.0, 2.0}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StepRecordTest, MissingNullAndNonNumericFigures) {
  const std::string json =
      R"({"step": 2, "loss": null, "lr": "x", "ranks": [{"attention_seconds": 1}]})";
  auto zero = ParseStepRecord(json, MissingFigure::kZero);
  ASSERT_TRUE(zero.ok() && zero->has_value());
  EXPECT_TRUE(std::isnan((*zero)->loss));
  EXPECT_TRUE(std::isnan((*zero)->lr));
  EXPECT_EQ((*zero)->grad_norm, 0.0);
  EXPECT_EQ((*zero)->ranks.at(0).rank, 0);
  EXPECT_EQ((*zero)->ranks.at(0).bytes_sent, 0.0);
  auto nan = ParseStepRecord(json, MissingFigure::kNaN);
  ASSERT_TRUE(nan.ok() && nan->has_value());
  EXPECT_TRUE(std::isnan((*nan)->grad_norm));
  EXPECT_TRUE(std::isnan((*nan)->ranks.at(0).bytes_sent));
  EXPECT_EQ((*nan)->ranks.at(0).attention_seconds, 1.0);
}

TEST(StepRecordTest, NonFiniteFiguresAreWrittenAsNull) {
  StepRecord r;
  r.step = 1;
  r.loss = std::numeric_limits<double>::quiet_NaN();
  r.tokens = std::numeric_limits<double>::infinity();
  const std::string json = r.ToJson();
  EXPECT_NE(json.find("\"loss\": null"), std::string::npos) << json;
  EXPECT_NE(json.find("\"tokens\": null"), std::string::npos) << json;
  EXPECT_EQ(json.find("ranks"), std::string::npos);
}

TEST(StepRecordTest, ValidationLossIsWrittenOnlyWhenSet) {
  StepRecord r = Sample();
  EXPECT_EQ(r.ToJson().find("validation_loss"), std::string::npos);
  auto without = ParseStepRecord(r.ToJson(), MissingFigure::kZero);
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE((*without)->validation_loss.has_value());
  r.validation_loss = 2.0 / 3.0;
  const std::string json = r.ToJson();
  EXPECT_NE(json.find("\"checkpoint_commit_step\": 0, \"validation_loss\": 0.66666666666666663, "
                      "\"ranks\""),
            std::string::npos)
      << json;
  auto parsed = ParseStepRecord(json, MissingFigure::kZero);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ((*parsed)->validation_loss, 2.0 / 3.0);  // exactly
  auto null = ParseStepRecord(R"({"step": 2, "validation_loss": null})", MissingFigure::kZero);
  ASSERT_TRUE(null.ok());
  ASSERT_TRUE((*null)->validation_loss.has_value());
  EXPECT_TRUE(std::isnan(*(*null)->validation_loss));
}

TEST(StepRecordTest, MfuIsWrittenOnlyWhenSetAndRoundTrips) {
  StepRecord r = Sample();
  EXPECT_EQ(r.ToJson().find("mfu_percent"), std::string::npos);
  auto without = ParseStepRecord(r.ToJson(), MissingFigure::kZero);
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE((*without)->mfu_percent.has_value());
  r.validation_loss = 2.5;
  r.mfu_percent = 100.0 / 3.0;
  const std::string json = r.ToJson();
  EXPECT_NE(json.find("\"validation_loss\": 2.5, \"mfu_percent\": 33.333333333333336, \"ranks\""),
            std::string::npos)
      << json;
  auto parsed = ParseStepRecord(json, MissingFigure::kZero);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ((*parsed)->mfu_percent, 100.0 / 3.0);  // exactly
  EXPECT_EQ((*parsed)->validation_loss, 2.5);
  EXPECT_EQ((*parsed)->ToJson(), json);
  // Without validation it follows the figures directly.
  r.validation_loss.reset();
  EXPECT_NE(r.ToJson().find("\"checkpoint_commit_step\": 0, \"mfu_percent\": "), std::string::npos);
  auto null = ParseStepRecord(R"({"step": 2, "mfu_percent": null})", MissingFigure::kZero);
  ASSERT_TRUE(null.ok());
  ASSERT_TRUE((*null)->mfu_percent.has_value());
  EXPECT_TRUE(std::isnan(*(*null)->mfu_percent));
}

TEST(StepRecordTest, WhatIsNotAStepRecord) {
  auto no_step = ParseStepRecord(R"({"validation_loss": 2.5})", MissingFigure::kZero);
  ASSERT_TRUE(no_step.ok());
  EXPECT_FALSE(no_step->has_value());
  for (const char* bad : {"[1]", "{", "{\"step\": 1.5}", "{\"step\": \"1\"}",
                          "{\"step\": 1, \"ranks\": 3}", "{\"step\": 1, \"ranks\": [2]}"}) {
    EXPECT_EQ(ParseStepRecord(bad, MissingFigure::kZero).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace ringtrain
