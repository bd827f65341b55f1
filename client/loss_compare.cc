#include "client/loss_compare.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/coordinator_client.h"
#include "client/loss_compare_local.h"
#include "client/loss_compare_service.h"

namespace ringtrain {
namespace fs = std::filesystem;

CLI::App* AddLossCompareCommand(CLI::App& app, LossCompareFlags* flags) {
  CLI::App* cmd = app.add_subcommand(
      "loss-compare",
      "Run a baseline and a test training config with ringtrain-run, or as jobs on a coordinator "
      "with --coordinator (same seed, deterministic settings), and compare their per-step losses. "
      "Exit 0 ok, 1 mismatch or failed run, 2 usage, 3 coordinator unreachable.");
  cmd->add_option("--baseline-config", flags->baseline_config, "TOML config of the baseline run")
      ->capture_default_str();
  cmd->add_option("--test-config", flags->test_config,
                  "TOML config of the test run (default: the baseline config)");
  cmd->add_option("--baseline-options", flags->baseline_options,
                  "Overrides for the baseline, split on whitespace; use the = form: "
                  "--baseline-options=\"--a.b=1 --c.d=2\"");
  cmd->add_option("--test-options", flags->test_options,
                  "Overrides for the test run, e.g. "
                  "--test-options=\"--parallelism.context_parallel_degree=4\"");
  cmd->add_option("--baseline-nproc", flags->baseline_nproc, "Ranks of the baseline run")
      ->capture_default_str();
  cmd->add_option("--test-nproc", flags->test_nproc, "Ranks of the test run")
      ->capture_default_str();
  cmd->add_option("--steps", flags->steps, "Training steps of each run")->required();
  cmd->add_option("--seed", flags->seed, "Seed shared by both runs")->capture_default_str();
  cmd->add_flag("--assert-equal", flags->assert_equal, "Require bitwise-equal losses at every step");
  cmd->add_option_function<double>(
      "--rtol", [flags](const double& v) { flags->rtol = v; },
      "Relative tolerance: |baseline - test| <= atol + rtol * |baseline| (default 0)");
  cmd->add_option_function<double>(
      "--atol", [flags](const double& v) { flags->atol = v; }, "Absolute tolerance (default 0)");
  cmd->add_option("--output-folder", flags->output_folder,
                  "Folder for logs, JSONL and summary.json (default: a new "
                  "./outputs/loss_compare-<UTC timestamp>)");
  cmd->add_option("--run", flags->run,
                  "The launcher (default: ringtrain-run next to this ringctl)");
  cmd->add_option("--coordinator", flags->coordinator,
                  "Run both sides as jobs on this coordinator (host:port) instead of with "
                  "ringtrain-run; the world size is then dp × cp from each config, so leave the "
                  "nproc flags at 1");
  cmd->add_option("--device-kind", flags->device_kind,
                  "With --coordinator: the kind of worker the jobs run on")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  return cmd;
}

absl::Status ValidateFlags(const LossCompareFlags& flags) {
  std::vector<std::string> problems;
  if (flags.steps <= 0) {
    problems.push_back(absl::StrCat("--steps=", flags.steps,
                                    ": must be a positive number of steps, e.g. --steps=20"));
  }
  for (const auto& [name, value] :
       {std::pair{"--baseline-nproc", flags.baseline_nproc}, {"--test-nproc", flags.test_nproc}}) {
    if (value <= 0) {
      problems.push_back(absl::StrCat(name, "=", value, ": must be at least 1 rank"));
    }
  }
  if (flags.seed < 0) problems.push_back(absl::StrCat("--seed=", flags.seed, ": must be >= 0"));
  for (const auto& [name, value] : {std::pair{"--rtol", flags.rtol}, {"--atol", flags.atol}}) {
    if (value && !(std::isfinite(*value) && *value >= 0)) {
      problems.push_back(absl::StrCat(name, "=", *value, ": must be a finite number >= 0"));
    }
  }
  if (flags.assert_equal && (flags.rtol || flags.atol)) {
    problems.push_back(
        "--assert-equal cannot be combined with --rtol/--atol: give --assert-equal for bitwise "
        "equality, or --rtol/--atol for a tolerance");
  }
  if (!flags.coordinator.empty()) {
    for (const auto& [name, value, options] :
         {std::tuple{"--baseline-nproc", flags.baseline_nproc, "--baseline-options"},
          {"--test-nproc", flags.test_nproc, "--test-options"}}) {
      if (value == 1) continue;
      problems.push_back(absl::StrCat(
          name, "=", value, ": with --coordinator the world size is the config's dp × cp; drop ",
          name, " and set the degrees in ", options, ", e.g. ", options,
          "=\"--parallelism.context_parallel_degree=", value, "\""));
    }
    if (!flags.run.empty()) {
      problems.push_back("--run and --coordinator exclude each other: --run names the local "
                         "launcher, --coordinator runs the sides as jobs on the cluster");
    }
  } else if (!flags.device_kind.empty()) {
    problems.push_back(absl::StrCat("--device-kind=", flags.device_kind,
                                    " applies only with --coordinator ADDR"));
  }
  if (flags.baseline_config.empty()) {
    problems.push_back("--baseline-config is empty: name a TOML file, e.g. configs/debug_model.toml");
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
}

Tolerance ToleranceFromFlags(const LossCompareFlags& flags) {
  Tolerance tolerance;
  if (flags.assert_equal) {
    tolerance.mode = Tolerance::Mode::kAssertEqual;
  } else if (flags.rtol || flags.atol) {
    tolerance.mode = Tolerance::Mode::kClose;
    tolerance.rtol = flags.rtol.value_or(0);
    tolerance.atol = flags.atol.value_or(0);
  }
  return tolerance;
}

std::vector<std::string> SplitOptions(absl::string_view options) {
  return absl::StrSplit(options, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty());
}

std::vector<std::string> BuildRunArgs(const RunSpec& spec) {
  std::vector<std::string> args = {spec.run_path, "--nproc", std::to_string(spec.nproc),
                                   spec.config};
  for (std::string& option : SplitOptions(spec.options)) args.push_back(std::move(option));
  args.push_back(absl::StrCat("--training.steps=", spec.steps));
  args.push_back(absl::StrCat("--metrics.jsonl=", spec.jsonl_path));
  args.push_back("--checkpoint.enable=false");
  args.push_back(absl::StrCat("--training.seed=", spec.seed));
  return args;
}

std::vector<std::string> BuildJobOverrides(absl::string_view options, int steps, int seed) {
  std::vector<std::string> overrides;
  for (absl::string_view option : SplitOptions(options)) {
    while (absl::ConsumePrefix(&option, "-")) {
    }
    overrides.emplace_back(option);
  }
  overrides.push_back(absl::StrCat("training.steps=", steps));
  overrides.push_back("checkpoint.enable=false");
  overrides.push_back(absl::StrCat("training.seed=", seed));
  return overrides;
}

absl::Status CheckSteps(const StepLosses& losses, int steps, absl::string_view side) {
  for (int step = 1; step <= steps; ++step) {
    if (losses.count(step) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          side, ": no loss for step ", step, " of ", steps, " (", losses.size(), " steps recorded",
          losses.empty() ? "" : absl::StrCat(", last ", losses.rbegin()->first), ")"));
    }
  }
  if (losses.size() != static_cast<size_t>(steps)) {
    const int extra = losses.rbegin()->first > steps ? losses.rbegin()->first
                                                     : losses.begin()->first;
    return absl::FailedPreconditionError(
        absl::StrCat(side, ": unexpected step ", extra, " (asked for steps 1..", steps, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Report> CompareLosses(const StepLosses& baseline, const StepLosses& test,
                                     const Tolerance& tolerance) {
  for (const auto& [side, mine, other] : {std::tuple{"test", &baseline, &test},
                                          std::tuple{"baseline", &test, &baseline}}) {
    for (const auto& entry : *mine) {
      if (other->count(entry.first) == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(side, ": no loss for step ", entry.first, " (the other run has one)"));
      }
    }
  }
  Report report;
  report.tolerance = tolerance;
  double sum_abs_diff = 0;
  for (const auto& [step, b] : baseline) {
    StepComparison c;
    c.step = step;
    c.baseline = b;
    c.test = test.at(step);
    c.diff = c.test - c.baseline;
    c.bitwise_equal = c.test == c.baseline;  // NaN never equals; 17 digits parse exactly
    const double abs_diff = std::fabs(c.diff);
    switch (tolerance.mode) {
      case Tolerance::Mode::kReportOnly: c.ok = true; break;
      case Tolerance::Mode::kAssertEqual: c.ok = c.bitwise_equal; break;
      case Tolerance::Mode::kClose:
        c.ok = abs_diff <= tolerance.atol + tolerance.rtol * std::fabs(c.baseline);  // NaN: false
        break;
    }
    const double rel_diff = c.baseline != 0 ? abs_diff / std::fabs(c.baseline)
                            : abs_diff == 0 ? 0.0
                                            : HUGE_VAL;
    if (report.max_abs_diff_step == 0 || abs_diff > report.max_abs_diff) {
      report.max_abs_diff = abs_diff;
      report.max_abs_diff_step = step;
    }
    report.max_rel_diff = std::max(report.max_rel_diff, rel_diff);
    sum_abs_diff += abs_diff;
    report.bitwise_equal_steps += c.bitwise_equal;
    if (!c.ok) report.failed_steps.push_back(step);
    report.steps.push_back(c);
  }
  if (!report.steps.empty()) report.mean_abs_diff = sum_abs_diff / report.steps.size();
  return report;
}

namespace {

std::string ToleranceText(const Tolerance& t) {
  return absl::StrFormat("|diff| <= atol %.3e + rtol %.3e * |baseline|", t.atol, t.rtol);
}

std::string StepList(const std::vector<int>& steps) {
  constexpr size_t kMaxListed = 20;
  std::vector<int> listed(steps.begin(), steps.begin() + std::min(steps.size(), kMaxListed));
  return absl::StrCat(absl::StrJoin(listed, ", "), steps.size() > kMaxListed ? ", ..." : "");
}

}  // namespace

std::string Verdict(const Report& report) {
  const size_t n = report.steps.size();
  switch (report.tolerance.mode) {
    case Tolerance::Mode::kReportOnly:
      return absl::StrCat("REPORT ONLY (no --assert-equal or --rtol/--atol): ",
                          report.bitwise_equal_steps, " of ", n, " steps bitwise equal");
    case Tolerance::Mode::kAssertEqual:
      if (report.passed()) return absl::StrCat("PASS: all ", n, " steps bitwise equal");
      return absl::StrCat("FAIL: ", report.failed_steps.size(), " of ", n,
                          " steps not bitwise equal (steps ", StepList(report.failed_steps), ")");
    case Tolerance::Mode::kClose:
      if (report.passed()) {
        return absl::StrCat("PASS: all ", n, " steps within ", ToleranceText(report.tolerance));
      }
      return absl::StrCat("FAIL: ", report.failed_steps.size(), " of ", n, " steps outside ",
                          ToleranceText(report.tolerance), " (steps ",
                          StepList(report.failed_steps), ")");
  }
  return "";
}

std::string FormatReport(const Report& report) {
  const bool checking = report.tolerance.mode != Tolerance::Mode::kReportOnly;
  std::string out = absl::StrFormat("%6s | %24s | %24s | %10s\n", "Step", "Baseline Loss",
                                    "Test Loss", "Difference");
  absl::StrAppend(&out, std::string(7, '-'), "+", std::string(26, '-'), "+",
                  std::string(26, '-'), "+", std::string(11, '-'), "\n");
  for (const StepComparison& c : report.steps) {
    absl::StrAppendFormat(&out, "%6d | %24.17g | %24.17g | % .3e%s\n", c.step, c.baseline, c.test,
                          c.diff, checking && !c.ok ? "  FAIL" : "");
  }
  absl::StrAppendFormat(&out, "\nSummary: %d steps compared\n", report.steps.size());
  absl::StrAppendFormat(&out, "  max |diff|         %.3e (step %d)\n", report.max_abs_diff,
                        report.max_abs_diff_step);
  absl::StrAppendFormat(&out, "  mean |diff|        %.3e\n", report.mean_abs_diff);
  absl::StrAppendFormat(&out, "  max relative diff  %.3e\n", report.max_rel_diff);
  absl::StrAppendFormat(&out, "  bitwise equal      %d of %d steps\n", report.bitwise_equal_steps,
                        report.steps.size());
  if (!report.passed()) {
    absl::StrAppend(&out, "Failed steps (", report.failed_steps.size(), "): ",
                    StepList(report.failed_steps), "\n");
  }
  absl::StrAppend(&out, "Verdict: ", Verdict(report), "\n");
  return out;
}

absl::StatusOr<StepLosses> ReadSideLosses(const LossCompareSide& side, int steps) {
  absl::StatusOr<StepLosses> losses = ReadStepLosses(side.jsonl_path);
  const absl::Status status =
      losses.ok() ? CheckSteps(*losses, steps, side.name)
                  : absl::Status(losses.status().code(),
                                 absl::StrCat(side.name, ": ", losses.status().message()));
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(status.message(), "; see ", side.log_path));
  }
  return losses;
}

namespace {

std::string DefaultOutputFolder() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
  std::string folder = absl::StrCat("outputs/loss_compare-", stamp);
  for (int i = 2; fs::exists(folder); ++i) folder = absl::StrCat("outputs/loss_compare-", stamp, "-", i);
  return folder;
}

nlohmann::json SideJson(const LossCompareSide& side, bool service) {
  nlohmann::json j = {{"config", side.config},         {"options", side.options},
                      {service ? "overrides" : "command", side.argv},
                      {"log", side.log_path},          {"jsonl", side.jsonl_path},
                      {"exit_code", side.exit_code},   {"seconds", side.seconds}};
  if (service) {
    j["job_id"] = side.job_id;
  } else {
    j["nproc"] = side.nproc;
  }
  return j;
}

nlohmann::json SummaryJson(const LossCompareFlags& flags, const Tolerance& tolerance,
                           const LossCompareSide& baseline,
                           const LossCompareSide& test, const Report* report,
                           const std::string& error, int exit_code) {
  static constexpr const char* kModes[] = {"report_only", "assert_equal", "tolerance"};
  nlohmann::json j = {{"mode", kModes[static_cast<int>(tolerance.mode)]},
                      {"rtol", tolerance.rtol},
                      {"atol", tolerance.atol},
                      {"steps", flags.steps},
                      {"seed", flags.seed},
                      {"baseline", SideJson(baseline, !flags.coordinator.empty())},
                      {"test", SideJson(test, !flags.coordinator.empty())},
                      {"exit_code", exit_code},
                      {"passed", exit_code == kExitOk}};
  if (!flags.coordinator.empty()) j["coordinator"] = flags.coordinator;
  if (!error.empty()) {
    j["verdict"] = "ERROR: " + error;
    return j;
  }
  j["verdict"] = Verdict(*report);
  j["statistics"] = {{"steps_compared", report->steps.size()},
                     {"max_abs_diff", report->max_abs_diff},
                     {"max_abs_diff_step", report->max_abs_diff_step},
                     {"mean_abs_diff", report->mean_abs_diff},
                     {"max_rel_diff", report->max_rel_diff},
                     {"bitwise_equal_steps", report->bitwise_equal_steps}};
  j["failed_steps"] = report->failed_steps;
  nlohmann::json& per_step = j["per_step"] = nlohmann::json::array();
  for (const StepComparison& c : report->steps) {
    per_step.push_back({{"step", c.step}, {"baseline_loss", c.baseline}, {"test_loss", c.test},
                        {"diff", c.diff}, {"bitwise_equal", c.bitwise_equal}, {"ok", c.ok}});
  }
  return j;
}

}  // namespace

int RunLossCompare(const LossCompareFlags& flags) {
  if (absl::Status valid = ValidateFlags(flags); !valid.ok()) {
    std::cerr << "ringctl loss-compare: " << valid.message() << "\n";
    return kExitUsage;
  }
  const Tolerance tolerance = ToleranceFromFlags(flags);
  const bool service = !flags.coordinator.empty();
  const std::string run = flags.run.empty() ? DefaultRunPath() : flags.run;
  const std::string folder =
      flags.output_folder.empty() ? DefaultOutputFolder() : flags.output_folder;
  LossCompareSide baseline, test;
  baseline.name = "baseline";
  baseline.config = flags.baseline_config;
  baseline.options = flags.baseline_options;
  baseline.nproc = flags.baseline_nproc;
  test.name = "test";
  test.config = flags.test_config.empty() ? flags.baseline_config : flags.test_config;
  test.options = flags.test_options;
  test.nproc = flags.test_nproc;

  std::vector<std::string> problems;
  if (!service && access(run.c_str(), X_OK) != 0) {
    problems.push_back(absl::StrCat("launcher ", run, " is not an executable file (",
                                    std::strerror(errno),
                                    "): build the ringtrain-run target or pass --run PATH"));
  }
  for (const LossCompareSide* side : {&baseline, &test}) {
    if (side == &test && test.config == baseline.config) continue;  // said once is enough
    if (!fs::is_regular_file(side->config)) {
      problems.push_back(absl::StrCat(side->name, " config ", side->config,
                                      " not found: run from the repository root or pass --",
                                      side->name, "-config FILE"));
    }
  }
  std::error_code error;
  fs::create_directories(folder, error);
  if (error) problems.push_back(absl::StrCat("cannot create ", folder, ": ", error.message()));
  if (!problems.empty()) {
    std::cerr << "ringctl loss-compare: " << absl::StrJoin(problems, "\n") << "\n";
    return kExitUsage;
  }

  for (LossCompareSide* side : {&baseline, &test}) {
    side->log_path = absl::StrCat(folder, "/", side->name, ".log");
    side->jsonl_path = absl::StrCat(folder, "/", side->name, ".jsonl");
    side->argv = service ? BuildJobOverrides(side->options, flags.steps, flags.seed)
                         : BuildRunArgs({run, side->nproc, side->config, side->options,
                                         flags.steps, side->jsonl_path, flags.seed});
  }
  std::cout << "Output folder: " << folder << std::endl;
  const std::string summary_path = folder + "/summary.json";
  auto finish = [&](const Report* report, const std::string& failure, int exit_code) {
    std::ofstream(summary_path)
        << SummaryJson(flags, tolerance, baseline, test, report, failure, exit_code).dump(2)
        << "\n";
    return exit_code;
  };

  std::unique_ptr<CoordinatorClient> client;
  if (service) client = std::make_unique<CoordinatorClient>(flags.coordinator);
  auto run_side = [&](LossCompareSide* side) {
    return service ? RunSideAsJob(*client, side, flags.steps, flags.device_kind)
                   : RunSideLocally(side, flags.steps);
  };
  absl::StatusOr<StepLosses> baseline_losses = run_side(&baseline);
  absl::StatusOr<StepLosses> test_losses =
      baseline_losses.ok() ? run_side(&test) : baseline_losses.status();
  absl::StatusOr<Report> report = test_losses.ok()
                                      ? CompareLosses(*baseline_losses, *test_losses, tolerance)
                                      : test_losses.status();
  if (!report.ok()) {
    std::cerr << "ringctl loss-compare: " << report.status().message() << "\n";
    // A failed run or missing steps is a mismatch; on the service, an unreachable coordinator or a
    // rejected config says so in the exit status too.
    const int code = service && (ExitCodeFor(report.status()) == kExitUnreachable ||
                                 ExitCodeFor(report.status()) == kExitUsage)
                         ? ExitCodeFor(report.status())
                         : kExitMismatch;
    return finish(nullptr, std::string(report.status().message()), code);
  }
  std::cout << "\n" << FormatReport(*report) << "Summary written to " << summary_path << std::endl;
  return finish(&*report, "", report->passed() ? kExitOk : kExitMismatch);
}

}  // namespace ringtrain
