// HangDetector on a made-up clock: the two verdicts (silence, stall), their thresholds, the
// startup grace, one report per rank; and the parser of the progress file.
#include "worker/agent/hang_detector.h"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

namespace ringtrain {
namespace {

using Clock = HangDetector::Clock;
using std::chrono::milliseconds;
using Phase = ProgressBeat::Phase;

constexpr Clock::time_point kStart{};

Clock::time_point At(int ms) { return kStart + milliseconds(ms); }

ProgressBeat Beat(int64_t beat, Phase phase, double phase_seconds, int64_t step) {
  ProgressBeat b;
  b.beat = beat;
  b.phase = phase;
  b.phase_seconds = phase_seconds;
  b.step = step;
  return b;
}

HangLimits Limits(int silence_ms, int stall_ms, int grace_ms) {
  HangLimits limits;
  limits.silence_limit = milliseconds(silence_ms);
  limits.stall_limit = milliseconds(stall_ms);
  limits.startup_grace = milliseconds(grace_ms);
  return limits;
}

TEST(ParseProgressBeatTest, ReadsTheTrainersLine) {
  const std::optional<ProgressBeat> b =
      ParseProgressBeat(R"({"beat":7,"phase":"wait","phase_seconds":2.5,"step":3})"
                        "\n");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->beat, 7);
  EXPECT_EQ(b->phase, Phase::kWait);
  EXPECT_DOUBLE_EQ(b->phase_seconds, 2.5);
  EXPECT_EQ(b->step, 3);
  EXPECT_EQ(ParseProgressBeat(R"({"beat":1,"phase":"compute","phase_seconds":0,"step":0})")->phase,
            Phase::kCompute);
  EXPECT_EQ(ParseProgressBeat(R"({"beat":1,"phase":"io","phase_seconds":0,"step":0})")->phase,
            Phase::kIo);
  EXPECT_EQ(ParseProgressBeat(R"({"beat":1,"phase":"later","phase_seconds":0,"step":0})")->phase,
            Phase::kOther);
}

TEST(ParseProgressBeatTest, TornOrMistypedIsNothing) {
  EXPECT_FALSE(ParseProgressBeat("").has_value());
  EXPECT_FALSE(ParseProgressBeat(R"({"beat":7,"phase":"wa)").has_value());
  EXPECT_FALSE(ParseProgressBeat(R"({"beat":7,"phase":"wait","step":3})").has_value());
  EXPECT_FALSE(
      ParseProgressBeat(R"({"beat":"7","phase":"wait","phase_seconds":1,"step":3})").has_value());
  EXPECT_FALSE(ParseProgressBeat("[1,2]").has_value());
  EXPECT_FALSE(ParseProgressBeat("\xff\xfe").has_value());
}

TEST(HangDetectorTest, SteadyBeatsAreNeverAHang) {
  HangDetector d(Limits(1000, 5000, 2000), kStart);
  for (int i = 1; i <= 100; ++i) {
    EXPECT_EQ(d.Observe(Beat(i, Phase::kCompute, 0.9, i), At(1500 + i * 900)), std::nullopt);
  }
}

TEST(HangDetectorTest, SilenceAfterBeatsNamesHowLongAndTheLastStep) {
  HangDetector d(Limits(10000, 0, 60000), kStart);
  EXPECT_EQ(d.Observe(Beat(1, Phase::kCompute, 0.1, 11), At(500)), std::nullopt);
  EXPECT_EQ(d.Observe(Beat(2, Phase::kWait, 0.2, 12), At(1500)), std::nullopt);
  // The same beat read again is no news; a missing or torn read neither.
  EXPECT_EQ(d.Observe(Beat(2, Phase::kWait, 0.2, 12), At(6000)), std::nullopt);
  EXPECT_EQ(d.Observe(std::nullopt, At(11400)), std::nullopt);
  EXPECT_EQ(d.Observe(Beat(2, Phase::kWait, 0.2, 12), At(11700)),
            "no heartbeat from the trainer for 10.2 s (process stopped or frozen; last step 12)");
  // Once per rank.
  EXPECT_EQ(d.Observe(std::nullopt, At(30000)), std::nullopt);
}

TEST(HangDetectorTest, NoFirstBeatWithinGracePlusSilence) {
  HangDetector d(Limits(10000, 0, 60000), kStart);
  EXPECT_EQ(d.Observe(std::nullopt, At(69900)), std::nullopt);
  const std::optional<std::string> reason = d.Observe(std::nullopt, At(70000));
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason,
            "no heartbeat from the trainer for 70.0 s since it started (process stopped or frozen "
            "before its first beat, or a trainer that does not write RINGTRAIN_PROGRESS_FILE)");
}

TEST(HangDetectorTest, TheGraceCoversOnlyTheFirstBeat) {
  HangDetector d(Limits(1000, 0, 60000), kStart);
  EXPECT_EQ(d.Observe(Beat(1, Phase::kIo, 0, 0), At(100)), std::nullopt);
  EXPECT_EQ(d.Observe(std::nullopt, At(1000)), std::nullopt);
  EXPECT_TRUE(d.Observe(std::nullopt, At(1100)).has_value());
}

TEST(HangDetectorTest, ComputeForStallLimitIsADeadlock) {
  HangDetector d(Limits(10000, 60000, 60000), kStart);
  EXPECT_EQ(d.Observe(Beat(1, Phase::kCompute, 59.9, 12), At(1000)), std::nullopt);
  EXPECT_EQ(d.Observe(Beat(2, Phase::kCompute, 61.0, 12), At(2000)),
            "computing for 61.0 s without reaching a collective or a step boundary (deadlock?; "
            "last step 12)");
  EXPECT_EQ(d.Observe(Beat(3, Phase::kCompute, 62.0, 12), At(3000)), std::nullopt);
}

TEST(HangDetectorTest, WaitingOrIoForLongIsNotAHang) {
  HangDetector d(Limits(10000, 1000, 60000), kStart);
  for (int i = 1; i <= 100; ++i) {
    EXPECT_EQ(d.Observe(Beat(i, i < 50 ? Phase::kWait : Phase::kIo, i, 4), At(i * 1000)),
              std::nullopt);
  }
}

TEST(HangDetectorTest, AStaleBeatIsNotJudgedForAStall) {
  // Stall on, silence off: a frozen trainer whose last beat said compute is not called a deadlock.
  HangDetector d(Limits(0, 5000, 60000), kStart);
  EXPECT_EQ(d.Observe(Beat(1, Phase::kCompute, 4.0, 1), At(1000)), std::nullopt);
  EXPECT_EQ(d.Observe(Beat(1, Phase::kCompute, 4.0, 1), At(600000)), std::nullopt);
  EXPECT_EQ(d.Observe(std::nullopt, At(700000)), std::nullopt);
}

TEST(HangDetectorTest, OffByDefault) {
  HangDetector d(HangLimits{}, kStart);
  EXPECT_FALSE(HangLimits{}.enabled());
  EXPECT_EQ(d.Observe(std::nullopt, At(10000000)), std::nullopt);
  EXPECT_EQ(d.Observe(Beat(1, Phase::kCompute, 1e6, 0), At(10000001)), std::nullopt);
}

}  // namespace
}  // namespace ringtrain
