#include "client/loss_compare.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ringtrain {

absl::Status CheckSteps(const StepLosses& losses, int steps, absl::string_view side) {
  for (int step = 1; step <= steps; ++step) {
    if (losses.count(step) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          side, ": no loss for step ", step, " of ", steps, " (", losses.size(), " steps recorded",
          losses.empty() ? "" : absl::StrCat(", last ", losses.rbegin()->first), ")"));
    }
  }
  if (losses.size() != static_cast<size_t>(steps)) {
    const int extra =
        losses.rbegin()->first > steps ? losses.rbegin()->first : losses.begin()->first;
    return absl::FailedPreconditionError(
        absl::StrCat(side, ": unexpected step ", extra, " (asked for steps 1..", steps, ")"));
  }
  return absl::OkStatus();
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

absl::StatusOr<Report> CompareLosses(const StepLosses& baseline, const StepLosses& test,
                                     const Tolerance& tolerance) {
  for (const auto& [side, mine, other] :
       {std::tuple{"test", &baseline, &test}, std::tuple{"baseline", &test, &baseline}}) {
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
  absl::StrAppend(&out, std::string(7, '-'), "+", std::string(26, '-'), "+", std::string(26, '-'),
                  "+", std::string(11, '-'), "\n");
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
    absl::StrAppend(&out, "Failed steps (", report.failed_steps.size(),
                    "): ", StepList(report.failed_steps), "\n");
  }
  absl::StrAppend(&out, "Verdict: ", Verdict(report), "\n");
  return out;
}

nlohmann::json ToleranceJson(const Tolerance& tolerance) {
  static constexpr const char* kModes[] = {"report_only", "assert_equal", "tolerance"};
  return {{"mode", kModes[static_cast<int>(tolerance.mode)]},
          {"rtol", tolerance.rtol},
          {"atol", tolerance.atol}};
}

nlohmann::json SideJson(const LossCompareSide& side, bool service) {
  nlohmann::json j = {{"config", side.config},
                      {"options", side.options},
                      {service ? "overrides" : "command", side.argv},
                      {"log", side.log_path},
                      {"jsonl", side.jsonl_path},
                      {"exit_code", side.exit_code},
                      {"seconds", side.seconds}};
  if (service) {
    j["job_id"] = side.job_id;
  } else {
    j["nproc"] = side.nproc;
  }
  return j;
}

nlohmann::json ReportJson(const Report& report) {
  nlohmann::json j;
  j["verdict"] = Verdict(report);
  j["statistics"] = {{"steps_compared", report.steps.size()},
                     {"max_abs_diff", report.max_abs_diff},
                     {"max_abs_diff_step", report.max_abs_diff_step},
                     {"mean_abs_diff", report.mean_abs_diff},
                     {"max_rel_diff", report.max_rel_diff},
                     {"bitwise_equal_steps", report.bitwise_equal_steps}};
  j["failed_steps"] = report.failed_steps;
  nlohmann::json& per_step = j["per_step"] = nlohmann::json::array();
  for (const StepComparison& c : report.steps) {
    per_step.push_back({{"step", c.step},
                        {"baseline_loss", c.baseline},
                        {"test_loss", c.test},
                        {"diff", c.diff},
                        {"bitwise_equal", c.bitwise_equal},
                        {"ok", c.ok}});
  }
  return j;
}

}  // namespace ringtrain
