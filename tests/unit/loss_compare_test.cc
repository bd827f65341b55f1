// Tests for ringctl loss-compare's logic, without processes: JSONL reading, the comparison and its
// tolerances, summary.json's pieces (client/loss_compare.h), the run arguments, option splitting
// and flag parsing/validation (client/loss_compare_command.h). The ringctl binary itself is
// exercised by tests/integration/ringctl_test.cc.
#include "client/loss_compare.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/jsonl.h"
#include "client/loss_compare_command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A JSONL file in a fresh temporary folder, removed at the end of the test.
class JsonlFile {
 public:
  explicit JsonlFile(const std::string& content) : path_(dir_ / "metrics.jsonl") {
    std::ofstream(path_) << content;
  }
  const std::string& path() const { return path_; }

 private:
  testing::TempDir dir_;
  std::string path_;
};

StepLosses Series(std::vector<double> losses) {
  StepLosses series;
  for (size_t i = 0; i < losses.size(); ++i) series[static_cast<int>(i) + 1] = losses[i];
  return series;
}

Tolerance Equal() { return {Tolerance::Mode::kAssertEqual, 0, 0}; }
Tolerance Close(double rtol, double atol) { return {Tolerance::Mode::kClose, rtol, atol}; }

// --- ReadStepLosses ------------------------------------------------------------------------------

TEST(ReadStepLossesTest, ReadsLossesExactlyAndIgnoresOtherFields) {
  JsonlFile file(
      "{\"step\": 1, \"loss\": 6.7041950225830078, \"grad_norm\": 2.5, \"lr\": 0.0003}\n"
      "{\"step\": 2, \"loss\": 6.1234567890123456, \"ranks\": [{\"rank\": 0, \"loss\": 1.0}, "
      "{\"rank\": 1, \"tokens\": [1, 2]}], \"note\": \"x\"}\n"
      "\n");
  absl::StatusOr<StepLosses> losses = ReadStepLosses(file.path());
  ASSERT_TRUE(losses.ok()) << losses.status();
  ASSERT_EQ(losses->size(), 2u);
  EXPECT_EQ(losses->at(1), 6.7041950225830078);  // bitwise: 17 digits round-trip
  EXPECT_EQ(losses->at(2), 6.1234567890123456);
}

TEST(ReadStepLossesTest, NullLossReadsAsNaN) {
  JsonlFile file("{\"step\": 1, \"loss\": null}\n");
  absl::StatusOr<StepLosses> losses = ReadStepLosses(file.path());
  ASSERT_TRUE(losses.ok()) << losses.status();
  EXPECT_TRUE(std::isnan(losses->at(1)));
}

TEST(ReadStepLossesTest, MalformedLineIsAnErrorNamingTheLine) {
  JsonlFile file("{\"step\": 1, \"loss\": 6.5}\n{\"step\": 2, \"loss\": 6.\n");
  absl::StatusOr<StepLosses> losses = ReadStepLosses(file.path());
  ASSERT_FALSE(losses.ok());
  EXPECT_EQ(losses.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(losses.status().message(), HasSubstr(file.path() + ":2:"));
  EXPECT_THAT(losses.status().message(), HasSubstr("not valid JSON"));
}

TEST(ReadStepLossesTest, MissingFieldsAndRepeatedStepsAreErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"loss\": 6.5}\n", ":1: no integer \"step\""},
      {"{\"step\": 1}\n", ":1: no numeric \"loss\""},
      {"{\"step\": 1, \"loss\": \"6.5\"}\n", ":1: no numeric \"loss\""},
      {"[1, 2]\n", ":1: not a JSON object"},
      {"{\"step\": 1, \"loss\": 1}\n{\"step\": 1, \"loss\": 1}\n", ":2: step 1 already appeared"},
  };
  for (const auto& [content, expected] : cases) {
    JsonlFile file(content);
    absl::StatusOr<StepLosses> losses = ReadStepLosses(file.path());
    ASSERT_FALSE(losses.ok()) << content;
    EXPECT_THAT(losses.status().message(), HasSubstr(expected)) << content;
  }
}

TEST(ReadStepLossesTest, MissingFileIsNotFound) {
  EXPECT_EQ(ReadStepLosses("/nonexistent/metrics.jsonl").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(LastStepInFile("/nonexistent/metrics.jsonl"), 0);
}

TEST(ReadStepLossesTest, LastStepSkipsAPartialLine) {
  JsonlFile file("{\"step\": 1, \"loss\": 6.5}\n{\"step\": 2, \"loss\": 6.4}\n{\"step\": 3, \"lo");
  EXPECT_EQ(LastStepInFile(file.path()), 2);
}

// --- CheckSteps and CompareLosses ----------------------------------------------------------------

TEST(CheckStepsTest, RequiresExactlyStepsOneToN) {
  EXPECT_TRUE(CheckSteps(Series({3, 2, 1}), 3, "baseline").ok());
  const absl::Status missing = CheckSteps({{1, 3.0}, {3, 1.0}}, 3, "test");
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.message(), HasSubstr("test: no loss for step 2 of 3"));
  EXPECT_THAT(CheckSteps(Series({3, 2}), 3, "baseline").message(),
              HasSubstr("baseline: no loss for step 3"));
  EXPECT_THAT(CheckSteps(Series({3, 2, 1, 0.5}), 3, "test").message(),
              HasSubstr("test: unexpected step 4"));
  EXPECT_THAT(CheckSteps({}, 2, "test").message(), HasSubstr("no loss for step 1"));
}

TEST(CompareLossesTest, EqualSeriesPassAssertEqual) {
  const StepLosses losses = Series({6.7041950225830078, 5.5, 4.25});
  absl::StatusOr<Report> report = CompareLosses(losses, losses, Equal());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->passed());
  EXPECT_EQ(report->bitwise_equal_steps, 3);
  EXPECT_EQ(report->max_abs_diff, 0.0);
  EXPECT_EQ(report->mean_abs_diff, 0.0);
  EXPECT_EQ(report->max_rel_diff, 0.0);
  EXPECT_THAT(Verdict(*report), HasSubstr("PASS: all 3 steps bitwise equal"));
}

TEST(CompareLossesTest, OneUlpFailsAssertEqualButPassesAtol) {
  const double a = 6.7041950225830078;
  const double b = std::nextafter(a, 10.0);
  const StepLosses baseline = Series({5.0, a, 4.0});
  const StepLosses test = Series({5.0, b, 4.0});

  absl::StatusOr<Report> equal = CompareLosses(baseline, test, Equal());
  ASSERT_TRUE(equal.ok()) << equal.status();
  EXPECT_FALSE(equal->passed());
  EXPECT_THAT(equal->failed_steps, ElementsAre(2));
  EXPECT_EQ(equal->bitwise_equal_steps, 2);
  EXPECT_EQ(equal->max_abs_diff_step, 2);
  EXPECT_EQ(equal->max_abs_diff, b - a);
  EXPECT_EQ(equal->steps[1].diff, b - a);
  EXPECT_THAT(Verdict(*equal), HasSubstr("FAIL: 1 of 3 steps not bitwise equal (steps 2)"));

  absl::StatusOr<Report> close = CompareLosses(baseline, test, Close(0, 1e-6));
  ASSERT_TRUE(close.ok());
  EXPECT_TRUE(close->passed());
  EXPECT_EQ(close->bitwise_equal_steps, 2);
}

TEST(CompareLossesTest, RtolScalesWithTheBaseline) {
  const StepLosses baseline = Series({10.0, 1.0});
  const StepLosses test = Series({10.0 + 9e-3, 1.0 + 2e-3});
  // Allowed |diff|: 1e-2 at step 1, 1e-3 at step 2.
  absl::StatusOr<Report> report = CompareLosses(baseline, test, Close(1e-3, 0));
  ASSERT_TRUE(report.ok());
  EXPECT_THAT(report->failed_steps, ElementsAre(2));
  EXPECT_NEAR(report->max_rel_diff, 2e-3, 1e-12);
  EXPECT_EQ(report->max_abs_diff_step, 1);
  EXPECT_NEAR(report->mean_abs_diff, (9e-3 + 2e-3) / 2, 1e-12);
  // atol adds to rtol's allowance.
  EXPECT_TRUE(CompareLosses(baseline, test, Close(1e-3, 1.5e-3))->passed());
}

TEST(CompareLossesTest, NaNFailsEveryCheckButNotReportOnly) {
  const StepLosses baseline = Series({std::nan(""), 1.0});
  const StepLosses test = Series({std::nan(""), 1.0});
  EXPECT_THAT(CompareLosses(baseline, test, Equal())->failed_steps, ElementsAre(1));
  EXPECT_THAT(CompareLosses(baseline, test, Close(1, 1))->failed_steps, ElementsAre(1));
  absl::StatusOr<Report> report = CompareLosses(baseline, test, Tolerance{});
  EXPECT_TRUE(report->passed());
  EXPECT_THAT(Verdict(*report), HasSubstr("REPORT ONLY"));
}

TEST(CompareLossesTest, DifferentStepsAreAnErrorNamingTheSide) {
  const absl::StatusOr<Report> report = CompareLosses(Series({1, 2, 3}), Series({1, 2}), Equal());
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(report.status().message(), HasSubstr("test: no loss for step 3"));
  EXPECT_THAT(CompareLosses(Series({1}), Series({1, 2}), Equal()).status().message(),
              HasSubstr("baseline: no loss for step 2"));
}

TEST(FormatReportTest, PrintsTableStatisticsAndVerdict) {
  const double a = 6.7041950225830078;
  const absl::StatusOr<Report> report = CompareLosses(Series({a, 2.0}), Series({a, 2.5}), Equal());
  ASSERT_TRUE(report.ok());
  const std::string text = FormatReport(*report);
  EXPECT_THAT(text, HasSubstr("Step |"));
  EXPECT_THAT(text, HasSubstr("Baseline Loss |"));
  EXPECT_THAT(text, HasSubstr("Test Loss | Difference"));
  EXPECT_THAT(text, HasSubstr("6.7041950225830078 |"));
  EXPECT_THAT(text, HasSubstr("0.000e+00"));
  EXPECT_THAT(text, HasSubstr("5.000e-01  FAIL"));
  EXPECT_THAT(text, HasSubstr("max |diff|         5.000e-01 (step 2)"));
  EXPECT_THAT(text, HasSubstr("bitwise equal      1 of 2 steps"));
  EXPECT_THAT(text, HasSubstr("Failed steps (1): 2"));
  EXPECT_THAT(text, HasSubstr("Verdict: FAIL"));
}

TEST(ReportJsonTest, SummaryPiecesHoldTheVerdictStatisticsStepsAndSides) {
  const absl::StatusOr<Report> report =
      CompareLosses(Series({1.0, 2.0}), Series({1.0, 2.5}), Equal());
  ASSERT_TRUE(report.ok());
  const nlohmann::json j = ReportJson(*report);
  EXPECT_EQ(j["verdict"], Verdict(*report));
  EXPECT_EQ(j["statistics"]["steps_compared"], 2);
  EXPECT_EQ(j["statistics"]["max_abs_diff_step"], 2);
  EXPECT_EQ(j["statistics"]["bitwise_equal_steps"], 1);
  EXPECT_EQ(j["failed_steps"], nlohmann::json::array({2}));
  ASSERT_EQ(j["per_step"].size(), 2u);
  EXPECT_EQ(j["per_step"][0]["bitwise_equal"], true);
  EXPECT_EQ(j["per_step"][1]["test_loss"], 2.5);
  EXPECT_EQ(j["per_step"][1]["ok"], false);

  EXPECT_EQ(ToleranceJson(Tolerance{})["mode"], "report_only");
  EXPECT_EQ(ToleranceJson(Equal())["mode"], "assert_equal");
  EXPECT_EQ(ToleranceJson(Close(1e-3, 0))["mode"], "tolerance");
  EXPECT_EQ(ToleranceJson(Close(1e-3, 0))["rtol"], 1e-3);

  LossCompareSide side;
  side.argv = {"a", "b"};
  side.job_id = "job-000001";
  const nlohmann::json local = SideJson(side, /*service=*/false);
  EXPECT_EQ(local["command"], nlohmann::json::array({"a", "b"}));
  EXPECT_TRUE(local.contains("nproc"));
  EXPECT_FALSE(local.contains("job_id"));
  const nlohmann::json service = SideJson(side, /*service=*/true);
  EXPECT_EQ(service["overrides"], nlohmann::json::array({"a", "b"}));
  EXPECT_EQ(service["job_id"], "job-000001");
  EXPECT_FALSE(service.contains("nproc"));
}

// --- Run arguments -------------------------------------------------------------------------------

TEST(SplitOptionsTest, SplitsOnAnyWhitespace) {
  EXPECT_THAT(SplitOptions("  --a.b=1\t--c.d=x \n --e.f=2 "),
              ElementsAre("--a.b=1", "--c.d=x", "--e.f=2"));
  EXPECT_TRUE(SplitOptions("").empty());
  EXPECT_TRUE(SplitOptions("   ").empty());
}

TEST(BuildRunArgsTest, AppendsDeterminismOverridesAfterUserOptions) {
  RunSpec spec;
  spec.run_path = "/bin/ringtrain-run";
  spec.nproc = 4;
  spec.config = "configs/debug_model.toml";
  spec.options = "--parallelism.context_parallel_degree=4  --training.steps=99";
  spec.steps = 20;
  spec.jsonl_path = "out/test.jsonl";
  spec.seed = 7;
  EXPECT_THAT(BuildRunArgs(spec),
              ElementsAre("/bin/ringtrain-run", "--nproc", "4", "configs/debug_model.toml",
                          "--parallelism.context_parallel_degree=4", "--training.steps=99",
                          "--training.steps=20", "--metrics.jsonl=out/test.jsonl",
                          "--checkpoint.enable=false", "--training.seed=7"));
}

// --- Flags ---------------------------------------------------------------------------------------

// Parses `ringctl loss-compare ARGS...`; on a CLI11 error returns it in *error.
LossCompareFlags Parse(std::vector<std::string> args, std::string* error = nullptr) {
  CLI::App app;
  LossCompareFlags flags;
  AddLossCompareCommand(app, &flags);
  args.insert(args.begin(), "loss-compare");
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (error)
      *error = e.what();
    else
      ADD_FAILURE() << e.what();
  }
  return flags;
}

TEST(FlagsTest, Defaults) {
  const LossCompareFlags flags = Parse({"--steps", "10"});
  EXPECT_EQ(flags.baseline_config, "configs/debug_model.toml");
  EXPECT_EQ(flags.test_config, "");
  EXPECT_EQ(flags.baseline_nproc, 1);
  EXPECT_EQ(flags.test_nproc, 1);
  EXPECT_EQ(flags.steps, 10);
  EXPECT_EQ(flags.seed, 42);
  EXPECT_FALSE(flags.assert_equal);
  EXPECT_FALSE(flags.rtol.has_value());
  EXPECT_FALSE(flags.atol.has_value());
  EXPECT_TRUE(ValidateFlags(flags).ok());
  EXPECT_EQ(ToleranceFromFlags(flags).mode, Tolerance::Mode::kReportOnly);
}

TEST(FlagsTest, ParsesEveryFlag) {
  const LossCompareFlags flags = Parse(
      {"--baseline-config=a.toml", "--test-config", "b.toml", "--baseline-options=--x.y=1 --z.w=2",
       "--test-options=--parallelism.context_parallel_degree=4", "--baseline-nproc=2",
       "--test-nproc", "4", "--steps=5", "--seed=3", "--rtol=1e-5", "--output-folder=out",
       "--run=/x/ringtrain-run"});
  EXPECT_EQ(flags.baseline_config, "a.toml");
  EXPECT_EQ(flags.test_config, "b.toml");
  EXPECT_EQ(flags.baseline_options, "--x.y=1 --z.w=2");
  EXPECT_EQ(flags.test_options, "--parallelism.context_parallel_degree=4");
  EXPECT_EQ(flags.baseline_nproc, 2);
  EXPECT_EQ(flags.test_nproc, 4);
  EXPECT_EQ(flags.seed, 3);
  EXPECT_EQ(flags.output_folder, "out");
  EXPECT_EQ(flags.run, "/x/ringtrain-run");
  ASSERT_TRUE(ValidateFlags(flags).ok());
  const Tolerance tolerance = ToleranceFromFlags(flags);
  EXPECT_EQ(tolerance.mode, Tolerance::Mode::kClose);
  EXPECT_EQ(tolerance.rtol, 1e-5);
  EXPECT_EQ(tolerance.atol, 0.0);
  EXPECT_EQ(ToleranceFromFlags(Parse({"--steps=1", "--assert-equal"})).mode,
            Tolerance::Mode::kAssertEqual);
}

TEST(FlagsTest, StepsAreRequired) {
  std::string error;
  Parse({}, &error);
  EXPECT_THAT(error, HasSubstr("--steps"));
}

TEST(FlagsTest, ConflictingAndOutOfRangeFlagsAreRejected) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--steps=3", "--assert-equal", "--rtol=1e-5"}, "--assert-equal cannot be combined"},
      {{"--steps=3", "--assert-equal", "--atol=0"}, "--assert-equal cannot be combined"},
      {{"--steps=0"}, "--steps=0: must be a positive"},
      {{"--steps=-2"}, "--steps=-2"},
      {{"--steps=3", "--baseline-nproc=0"}, "--baseline-nproc=0: must be at least 1"},
      {{"--steps=3", "--test-nproc=-1"}, "--test-nproc=-1"},
      {{"--steps=3", "--rtol=-1"}, "--rtol=-1: must be a finite number >= 0"},
      {{"--steps=3", "--seed=-1"}, "--seed=-1"},
  };
  for (const auto& [args, expected] : cases) {
    const absl::Status status = ValidateFlags(Parse(args));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << expected;
    EXPECT_THAT(status.message(), HasSubstr(expected));
  }
  // Every problem is reported at once.
  const absl::Status both = ValidateFlags(Parse({"--steps=0", "--test-nproc=0"}));
  EXPECT_THAT(both.message(), HasSubstr("--steps=0"));
  EXPECT_THAT(both.message(), HasSubstr("--test-nproc=0"));
}

}  // namespace
}  // namespace ringtrain
