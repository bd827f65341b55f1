#include "client/loss_compare_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
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
  cmd->add_flag("--assert-equal", flags->assert_equal,
                "Require bitwise-equal losses at every step");
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
  cmd->footer(
      "Examples:\n"
      "  ringctl loss-compare --test-nproc 4 "
      "--test-options=\"--parallelism.context_parallel_degree=4\" --steps 20 --atol 1e-4\n"
      "  ringctl loss-compare --coordinator 127.0.0.1:50051 "
      "--test-options=\"--parallelism.context_parallel_degree=2\" --steps 10 --assert-equal");
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
      problems.push_back(
          "--run and --coordinator exclude each other: --run names the local "
          "launcher, --coordinator runs the sides as jobs on the cluster");
    }
  } else if (!flags.device_kind.empty()) {
    problems.push_back(
        absl::StrCat("--device-kind=", flags.device_kind, " applies only with --coordinator ADDR"));
  }
  if (flags.baseline_config.empty()) {
    problems.push_back(
        "--baseline-config is empty: name a TOML file, e.g. configs/debug_model.toml");
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

namespace {

std::string DefaultOutputFolder() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
  std::string folder = absl::StrCat("outputs/loss_compare-", stamp);
  for (int i = 2; fs::exists(folder); ++i) {
    folder = absl::StrCat("outputs/loss_compare-", stamp, "-", i);
  }
  return folder;
}

// What would stop the runs before they start — the launcher (locally), the config files, the output
// folder (created here) — one line each, saying what would work.
std::vector<std::string> InputProblems(bool service, const std::string& run,
                                       const LossCompareSide& baseline, const LossCompareSide& test,
                                       const std::string& folder) {
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
  return problems;
}

// summary.json: the tolerance, the settings, both sides, the exit code and, when the comparison was
// made, its report; otherwise the verdict is "ERROR: <error>".
nlohmann::json SummaryJson(const LossCompareFlags& flags, const Tolerance& tolerance,
                           const LossCompareSide& baseline, const LossCompareSide& test,
                           const Report* report, const std::string& error, int exit_code) {
  const bool service = !flags.coordinator.empty();
  nlohmann::json j = ToleranceJson(tolerance);
  j["steps"] = flags.steps;
  j["seed"] = flags.seed;
  j["baseline"] = SideJson(baseline, service);
  j["test"] = SideJson(test, service);
  j["exit_code"] = exit_code;
  j["passed"] = exit_code == kExitOk;
  if (service) j["coordinator"] = flags.coordinator;
  if (!error.empty()) {
    j["verdict"] = "ERROR: " + error;
    return j;
  }
  j.update(ReportJson(*report));
  return j;
}

// The exit code when no comparison could be made. A failed run or missing steps is a mismatch; on
// the service, an unreachable coordinator or a rejected config says so in the exit status too.
int FailureExitCode(const absl::Status& failure, bool service) {
  const int code = ExitCodeFor(failure);
  return service && (code == kExitUnreachable || code == kExitUsage) ? code : kExitMismatch;
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

  if (const std::vector<std::string> problems = InputProblems(service, run, baseline, test, folder);
      !problems.empty()) {
    std::cerr << "ringctl loss-compare: " << absl::StrJoin(problems, "\n") << "\n";
    return kExitUsage;
  }
  for (LossCompareSide* side : {&baseline, &test}) {
    side->log_path = absl::StrCat(folder, "/", side->name, ".log");
    side->jsonl_path = absl::StrCat(folder, "/", side->name, ".jsonl");
    side->argv = service ? BuildJobOverrides(side->options, flags.steps, flags.seed)
                         : BuildRunArgs({run, side->nproc, side->config, side->options, flags.steps,
                                         side->jsonl_path, flags.seed});
  }
  std::cout << "Output folder: " << folder << std::endl;
  const std::string summary_path = folder + "/summary.json";
  auto finish =
      [&](const Report* report, const std::string& failure, int exit_code) {
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
    return finish(nullptr, std::string(report.status().message()),
                  FailureExitCode(report.status(), service));
  }
  std::cout << "\n" << FormatReport(*report) << "Summary written to " << summary_path << std::endl;
  return finish(&*report, "", report->passed() ? kExitOk : kExitMismatch);
}

}  // namespace ringtrain
