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

namespace ringtrain {
namespace fs = std::filesystem;

CLI::App* AddLossCompareCommand(CLI::App& app, LossCompareFlags* flags) {
  CLI::App* cmd = app.add_subcommand(
      "loss-compare",
      "Run a baseline and a test training config with ringtrain-run (same seed, deterministic "
      "settings) and compare their per-step losses. Exit 0 ok, 1 mismatch or failed run, 2 usage.");
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

namespace {

// One side of the comparison as it went.
struct Side {
  std::string name;  // "baseline" or "test"
  std::string config, options, log_path, jsonl_path;
  int nproc = 1;
  std::vector<std::string> argv;
  int exit_code = -1;  // -1: not run
  double seconds = 0;
};

std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_-+=./:,@%") == std::string::npos) {
    return arg;
  }
  std::string quoted = "'";
  for (char ch : arg) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs side->argv with stdout and stderr into side->log_path; on a terminal, shows the last step in
// the JSONL at most once a second. Sets exit_code (128 + signal when killed) and seconds; returns the
// last few KB of output for error messages. An error only when the run could not be started.
absl::StatusOr<std::string> RunLogged(Side* side, int steps) {
  std::ofstream log(side->log_path, std::ios::binary | std::ios::trunc);
  if (!log) return absl::FailedPreconditionError("cannot write " + side->log_path);
  std::vector<char*> argv;
  for (std::string& arg : side->argv) argv.push_back(arg.data());
  argv.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);  // the duplicates lose O_CLOEXEC
    dup2(fds[1], STDERR_FILENO);
    execv(argv[0], argv.data());
    dprintf(STDERR_FILENO, "ringctl: cannot execute %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  const bool tty = isatty(STDOUT_FILENO);
  std::string tail;
  double last_shown = 0;
  char buffer[65536];
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, 250);
    if (ready > 0) {
      const ssize_t n = read(fds[0], buffer, sizeof(buffer));
      if (n == 0) break;
      if (n < 0 && errno != EINTR) break;
      if (n > 0) {
        log.write(buffer, n).flush();
        tail.append(buffer, n);
        if (tail.size() > 8192) tail.erase(0, tail.size() - 4096);
      }
    }
    if (tty && SecondsSince(start) - last_shown >= 1.0) {
      last_shown = SecondsSince(start);
      std::printf("\r  %s: step %d/%d, %.0f s  ", side->name.c_str(),
                  LastStepInFile(side->jsonl_path), steps, last_shown);
      std::fflush(stdout);
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  side->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  side->seconds = SecondsSince(start);
  if (tty) std::printf("\r%60s\r", "");
  return tail;
}

// The last `lines` lines of `text`, each indented.
std::string LastLines(const std::string& text, int lines) {
  std::vector<absl::string_view> all = absl::StrSplit(text, '\n', absl::SkipEmpty());
  const size_t first = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  std::string out;
  for (size_t i = first; i < all.size(); ++i) absl::StrAppend(&out, "    ", all[i], "\n");
  return out;
}

std::string DefaultRunPath() {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  return error ? "ringtrain-run" : (self.parent_path() / "ringtrain-run").string();
}

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

nlohmann::json SideJson(const Side& side) {
  return {{"config", side.config},     {"options", side.options},     {"nproc", side.nproc},
          {"command", side.argv},      {"log", side.log_path},        {"jsonl", side.jsonl_path},
          {"exit_code", side.exit_code}, {"seconds", side.seconds}};
}

nlohmann::json SummaryJson(const LossCompareFlags& flags, const Tolerance& tolerance,
                           const Side& baseline, const Side& test, const Report* report,
                           const std::string& error, int exit_code) {
  static constexpr const char* kModes[] = {"report_only", "assert_equal", "tolerance"};
  nlohmann::json j = {{"mode", kModes[static_cast<int>(tolerance.mode)]},
                      {"rtol", tolerance.rtol},
                      {"atol", tolerance.atol},
                      {"steps", flags.steps},
                      {"seed", flags.seed},
                      {"baseline", SideJson(baseline)},
                      {"test", SideJson(test)},
                      {"exit_code", exit_code},
                      {"passed", exit_code == kExitOk}};
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

// Runs one side and reads its losses; the error names the side and points at its log.
absl::StatusOr<StepLosses> RunSide(Side* side, int steps) {
  std::cout << side->name << ": "
            << absl::StrJoin(side->argv, " ",
                             [](std::string* out, const std::string& a) { *out += ShellQuote(a); })
            << "\n  (log: " << side->log_path << ")" << std::endl;
  std::error_code ignored;
  fs::remove(side->jsonl_path, ignored);  // never read a stale file from an earlier comparison
  absl::StatusOr<std::string> tail = RunLogged(side, steps);
  if (!tail.ok()) {
    return absl::Status(tail.status().code(),
                        absl::StrCat(side->name, " run could not start: ", tail.status().message()));
  }
  if (side->exit_code != 0) {
    std::cerr << side->name << " run output ends with:\n" << LastLines(*tail, 20);
    return absl::AbortedError(absl::StrCat(side->name, " run failed (exit ", side->exit_code,
                                           " after ", absl::StrFormat("%.1f", side->seconds),
                                           " s); see ", side->log_path));
  }
  std::cout << absl::StrFormat("  %s: finished in %.1f s", side->name, side->seconds) << std::endl;
  absl::StatusOr<StepLosses> losses = ReadStepLosses(side->jsonl_path);
  const absl::Status status =
      losses.ok() ? CheckSteps(*losses, steps, side->name)
                  : absl::Status(losses.status().code(),
                                 absl::StrCat(side->name, ": ", losses.status().message()));
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(status.message(), "; see ", side->log_path));
  }
  return losses;
}

}  // namespace

int RunLossCompare(const LossCompareFlags& flags) {
  if (absl::Status valid = ValidateFlags(flags); !valid.ok()) {
    std::cerr << "ringctl loss-compare: " << valid.message() << "\n";
    return kExitUsage;
  }
  const Tolerance tolerance = ToleranceFromFlags(flags);
  const std::string run = flags.run.empty() ? DefaultRunPath() : flags.run;
  const std::string folder =
      flags.output_folder.empty() ? DefaultOutputFolder() : flags.output_folder;
  Side baseline, test;
  baseline.name = "baseline";
  baseline.config = flags.baseline_config;
  baseline.options = flags.baseline_options;
  baseline.nproc = flags.baseline_nproc;
  test.name = "test";
  test.config = flags.test_config.empty() ? flags.baseline_config : flags.test_config;
  test.options = flags.test_options;
  test.nproc = flags.test_nproc;

  std::vector<std::string> problems;
  if (access(run.c_str(), X_OK) != 0) {
    problems.push_back(absl::StrCat("launcher ", run, " is not an executable file (",
                                    std::strerror(errno),
                                    "): build the ringtrain-run target or pass --run PATH"));
  }
  for (const Side* side : {&baseline, &test}) {
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

  for (Side* side : {&baseline, &test}) {
    side->log_path = absl::StrCat(folder, "/", side->name, ".log");
    side->jsonl_path = absl::StrCat(folder, "/", side->name, ".jsonl");
    side->argv = BuildRunArgs(
        {run, side->nproc, side->config, side->options, flags.steps, side->jsonl_path, flags.seed});
  }
  std::cout << "Output folder: " << folder << std::endl;
  const std::string summary_path = folder + "/summary.json";
  auto finish = [&](const Report* report, const std::string& failure, int exit_code) {
    std::ofstream(summary_path)
        << SummaryJson(flags, tolerance, baseline, test, report, failure, exit_code).dump(2)
        << "\n";
    return exit_code;
  };

  absl::StatusOr<StepLosses> baseline_losses = RunSide(&baseline, flags.steps);
  absl::StatusOr<StepLosses> test_losses =
      baseline_losses.ok() ? RunSide(&test, flags.steps) : baseline_losses.status();
  absl::StatusOr<Report> report = test_losses.ok()
                                      ? CompareLosses(*baseline_losses, *test_losses, tolerance)
                                      : test_losses.status();
  if (!report.ok()) {
    std::cerr << "ringctl loss-compare: " << report.status().message() << "\n";
    return finish(nullptr, std::string(report.status().message()), kExitMismatch);
  }
  std::cout << "\n" << FormatReport(*report) << "Summary written to " << summary_path << std::endl;
  return finish(&*report, "", report->passed() ? kExitOk : kExitMismatch);
}

}  // namespace ringtrain
