// ResolveLrPhases (common/config/lr_phases.h): torchtitan's clamps, each with a warning that names
// the keys and values, and the debug config's short runs accepted by the parser.
#include "common/config/lr_phases.h"

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(LrPhasesTest, PhasesThatFitAreKeptWithoutWarnings) {
  const LrPhases phases = ResolveLrPhases(100, 10, 0.5);
  EXPECT_EQ(phases.warmup_steps, 10);
  EXPECT_EQ(phases.decay_steps, 50);
  EXPECT_THAT(phases.warnings, IsEmpty());
  // Exactly filling the run is fine too.
  EXPECT_THAT(ResolveLrPhases(100, 50, 0.5).warnings, IsEmpty());
}

TEST(LrPhasesTest, AWarmupLongerThanTheRunIsClampedToIt) {
  const LrPhases phases = ResolveLrPhases(10, 200, 0.0);
  EXPECT_EQ(phases.warmup_steps, 10);
  EXPECT_EQ(phases.decay_steps, 0);
  EXPECT_THAT(phases.warnings,
              ElementsAre("lr_scheduler.warmup_steps = 200 is more than training.steps = 10: "
                          "clamped to 10"));
}

TEST(LrPhasesTest, ADecayThatDoesNotFitAfterTheWarmupIsShortened) {
  // The debug config (warmup 10, decay_ratio 0.5) at 12 steps: decay round(6) → 2.
  const LrPhases phases = ResolveLrPhases(12, 10, 0.5);
  EXPECT_EQ(phases.warmup_steps, 10);
  EXPECT_EQ(phases.decay_steps, 2);
  EXPECT_THAT(phases.warnings,
              ElementsAre("lr_scheduler.warmup_steps (10) plus the decay steps "
                          "round(training.steps × lr_scheduler.decay_ratio) = round(12 × 0.5) = 6 "
                          "is more than training.steps = 12: decay clamped to 2 steps"));
  // Both clamps at once: warmup to the run, then no decay left.
  const LrPhases both = ResolveLrPhases(10, 200, 0.3);
  EXPECT_EQ(both.warmup_steps, 10);
  EXPECT_EQ(both.decay_steps, 0);
  EXPECT_EQ(both.warnings.size(), 2u);
}

TEST(LrPhasesTest, TheDebugConfigTakesTenStepsWithAWarning) {
  const std::string path = testing::ConfigPath("debug_model.toml");
  const absl::StatusOr<JobConfig> config = LoadJobConfig(path, {"training.steps=10"});
  ASSERT_TRUE(config.ok()) << config.status();
  const LrPhases phases = ResolveLrPhases(*config);
  EXPECT_EQ(phases.warmup_steps, 10);
  EXPECT_EQ(phases.decay_steps, 0);
  ASSERT_EQ(phases.warnings.size(), 1u);
  EXPECT_THAT(phases.warnings[0], ::testing::HasSubstr("decay clamped to 0 steps"));
  // Eval mode takes no optimizer steps: nothing to warn about.
  const absl::StatusOr<JobConfig> eval =
      LoadJobConfig(path, {"training.steps=10", "job.mode=eval"});
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_THAT(ResolveLrPhases(*eval).warnings, IsEmpty());
}

}  // namespace
}  // namespace ringtrain
