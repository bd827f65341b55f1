#include "client/compare_command.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/exit_codes.h"
#include "client/job_format.h"
#include "client/validation_view.h"
#include "common/printable.h"

namespace ringtrain {
namespace {

StepLosses LossesOf(const JobSteps& job) {
  StepLosses losses;
  for (const v1::StepEvent& event : job.steps)
    losses[static_cast<int>(event.step())] = event.loss();
  return losses;
}

StepLosses ValidationLossesOf(const JobSteps& job) {
  StepLosses losses;
  for (const ValidationPoint& v : ValidationPoints(job.steps)) losses[int(v.step)] = v.loss;
  return losses;
}

// The losses of `a` and `b` at the steps both hold.
std::pair<StepLosses, StepLosses> Common(const StepLosses& a, const StepLosses& b) {
  StepLosses common_a, common_b;
  for (const auto& [step, loss] : a) {
    const auto other = b.find(step);
    if (other == b.end()) continue;
    common_a[step] = loss;
    common_b[step] = other->second;
  }
  return {common_a, common_b};
}

// "steps 1–7", "no steps".
std::string StepRange(const StepLosses& losses) {
  if (losses.empty()) return "no steps";
  if (losses.size() == 1) return absl::StrCat("step ", losses.begin()->first);
  return absl::StrCat("steps ", losses.begin()->first, "–", losses.rbegin()->first);
}

// "job-000001 (name), SUCCEEDED, 3 steps".
std::string Describe(const JobSteps& job) {
  const v1::Job& j = job.job;
  return absl::StrCat(EscapeForTerminal(j.job_id()),
                      j.name().empty() || j.name() == j.job_id()
                          ? ""
                          : absl::StrCat(" (", EscapeForTerminal(j.name()), ")"),
                      ", ", JobStateName(j.state()), ", ", job.steps.size(), " step",
                      job.steps.size() == 1 ? "" : "s");
}

}  // namespace

bool JobComparison::passed() const {
  if (report.tolerance.mode == Tolerance::Mode::kReportOnly) return true;
  return report.passed() && !finished_with_different_steps &&
         (!validation.has_value() || validation->passed());
}

absl::StatusOr<JobComparison> CompareJobSteps(const JobSteps& baseline, const JobSteps& test,
                                              const Tolerance& tolerance) {
  const StepLosses a = LossesOf(baseline), b = LossesOf(test);
  const auto [common_a, common_b] = Common(a, b);
  if (common_a.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("no step in common: ", baseline.job.job_id(),
                                                      " has ", StepRange(a), ", ",
                                                      test.job.job_id(), " has ", StepRange(b)));
  }
  JobComparison out;
  absl::StatusOr<Report> report = CompareLosses(common_a, common_b, tolerance);
  if (!report.ok()) return report.status();
  out.report = *std::move(report);
  for (const auto* side : {&baseline, &test}) {
    const StepLosses& mine = side == &baseline ? a : b;
    if (!IsTerminal(side->job.state())) {
      out.notes.push_back(absl::StrCat(side->job.job_id(), " is ", JobStateName(side->job.state()),
                                       ": ", StepRange(mine), " so far"));
    }
    if (mine.size() > common_a.size()) {
      out.notes.push_back(absl::StrCat(side->job.job_id(), " has ", mine.size() - common_a.size(),
                                       " step(s) the other lacks (", StepRange(mine),
                                       "); compared ", StepRange(common_a)));
    }
  }
  const StepLosses va = ValidationLossesOf(baseline), vb = ValidationLossesOf(test);
  const auto [common_va, common_vb] = Common(va, vb);
  if (!common_va.empty()) {
    absl::StatusOr<Report> validation = CompareLosses(common_va, common_vb, tolerance);
    if (!validation.ok()) return validation.status();
    out.validation = *std::move(validation);
  } else if (!va.empty() || !vb.empty()) {
    out.notes.push_back(absl::StrCat("no validated step in common: ", baseline.job.job_id(),
                                     " has ", va.size(), ", ", test.job.job_id(), " has ",
                                     vb.size()));
  }
  out.finished_with_different_steps =
      IsTerminal(baseline.job.state()) && IsTerminal(test.job.state()) && a.size() != b.size();
  if (out.finished_with_different_steps) {
    out.notes.push_back("both jobs have finished with different steps: a check fails");
  }
  return out;
}

CLI::App* AddCompareCommand(CLI::App& app, CompareFlags* flags) {
  CLI::App* cmd = app.add_subcommand(
      "compare",
      "Compare two jobs' stored step losses (finished or running; JOB_A is the baseline) with "
      "loss-compare's table and verdict. Exit 0 ok, 1 mismatch or unknown job, 2 usage, 3 "
      "coordinator unreachable.");
  cmd->add_option("JOB_A", flags->baseline_job, "The baseline job's id")->required();
  cmd->add_option("JOB_B", flags->test_job, "The test job's id")->required();
  cmd->add_flag("--assert-equal", flags->assert_equal,
                "Require bitwise-equal losses at every common step");
  cmd->add_option_function<double>(
      "--rtol", [flags](const double& v) { flags->rtol = v; },
      "Relative tolerance: |baseline - test| <= atol + rtol * |baseline| (default 0)");
  cmd->add_option_function<double>(
      "--atol", [flags](const double& v) { flags->atol = v; }, "Absolute tolerance (default 0)");
  cmd->footer(
      "Examples:\n"
      "  ringctl compare job-000001 job-000002 --assert-equal\n"
      "  ringctl compare job-000001 job-000002 --atol 1e-4");
  return cmd;
}

int RunCompare(const CompareFlags& flags) {
  for (const auto& [name, value] : {std::pair{"--rtol", flags.rtol}, {"--atol", flags.atol}}) {
    if (value && !(std::isfinite(*value) && *value >= 0)) {
      std::cerr << "ringctl compare: " << name << "=" << *value << ": must be a finite number >= 0"
                << std::endl;
      return kExitUsage;
    }
  }
  if (flags.assert_equal && (flags.rtol || flags.atol)) {
    std::cerr << "ringctl compare: --assert-equal cannot be combined with --rtol/--atol: give "
                 "--assert-equal for bitwise equality, or --rtol/--atol for a tolerance"
              << std::endl;
    return kExitUsage;
  }
  Tolerance tolerance;
  if (flags.assert_equal) {
    tolerance.mode = Tolerance::Mode::kAssertEqual;
  } else if (flags.rtol || flags.atol) {
    tolerance.mode = Tolerance::Mode::kClose;
    tolerance.rtol = flags.rtol.value_or(0);
    tolerance.atol = flags.atol.value_or(0);
  }

  CoordinatorClient client(flags.coordinator);
  JobSteps sides[2];
  const std::string* ids[2] = {&flags.baseline_job, &flags.test_job};
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<JobSteps> fetched = FetchJobSteps(client, *ids[i]);
    if (!fetched.ok()) {
      std::cerr << CommandErrorLine("compare", fetched.status(), *ids[i]) << std::endl;
      return ExitCodeFor(fetched.status());
    }
    sides[i] = *std::move(fetched);
  }
  const absl::StatusOr<JobComparison> comparison = CompareJobSteps(sides[0], sides[1], tolerance);
  if (!comparison.ok()) {
    std::cerr << "ringctl compare: " << comparison.status().message() << std::endl;
    return kExitMismatch;
  }
  const int exit_code = comparison->passed() ? kExitOk : kExitMismatch;
  if (flags.output == "json") {
    nlohmann::json j = ToleranceJson(tolerance);
    j["baseline"] = sides[0].job.job_id();
    j["test"] = sides[1].job.job_id();
    j["notes"] = comparison->notes;
    j["passed"] = exit_code == kExitOk;
    j.update(ReportJson(comparison->report));
    if (comparison->validation) j["validation"] = ReportJson(*comparison->validation);
    std::cout << j.dump() << std::endl;
    return exit_code;
  }
  std::cout << "baseline: " << Describe(sides[0]) << "\n"
            << "test:     " << Describe(sides[1]) << "\n";
  for (const std::string& note : comparison->notes) {
    std::cout << "note: " << EscapeForTerminal(note) << "\n";
  }
  std::cout << "\n" << FormatReport(comparison->report);
  if (comparison->validation) {
    std::cout << "\nvalidation loss:\n" << FormatReport(*comparison->validation);
  }
  if (comparison->finished_with_different_steps && tolerance.mode != Tolerance::Mode::kReportOnly) {
    std::cout << "Verdict: FAIL: the jobs finished with different steps (" << sides[0].steps.size()
              << " and " << sides[1].steps.size() << ")\n";
  }
  std::cout << std::flush;
  return exit_code;
}

}  // namespace ringtrain
