// The comparison behind `ringctl loss-compare` (client/loss_compare_command.h): two sides' per-step
// losses → a Report (per-step differences, statistics, verdict under a Tolerance) → the printed
// table and summary.json's figures. No processes and no flags, so it is testable alone; the runners
// (loss_compare_local.h, loss_compare_service.h) fill a LossCompareSide and read its losses back
// with ReadSideLosses.
#ifndef RINGTRAIN_CLIENT_LOSS_COMPARE_H_
#define RINGTRAIN_CLIENT_LOSS_COMPARE_H_

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/jsonl.h"

namespace ringtrain {

// How the losses of a step must agree.
struct Tolerance {
  enum class Mode {
    kReportOnly,   // no check: print the comparison only
    kAssertEqual,  // bitwise equal
    kClose,        // |baseline - test| <= atol + rtol * |baseline|
  };
  Mode mode = Mode::kReportOnly;
  double rtol = 0;
  double atol = 0;
};

// One side of the comparison as it went (written to summary.json).
struct LossCompareSide {
  std::string name;  // "baseline" or "test"
  std::string config, options, log_path, jsonl_path;
  int nproc = 1;
  std::vector<std::string> argv;  // locally: the ringtrain-run command; on the service: overrides
  std::string job_id;             // on the service, once submitted
  int exit_code = -1;             // -1: not run
  double seconds = 0;
};

// OK if `losses` holds exactly steps 1..steps; otherwise FAILED_PRECONDITION naming `side` and the
// first missing (or unexpected) step.
absl::Status CheckSteps(const StepLosses& losses, int steps, absl::string_view side);

// ReadStepLosses(side.jsonl_path) then CheckSteps; errors name the side and point at its log.
absl::StatusOr<StepLosses> ReadSideLosses(const LossCompareSide& side, int steps);

struct StepComparison {
  int step = 0;
  double baseline = 0;
  double test = 0;
  double diff = 0;  // test - baseline
  bool bitwise_equal = false;
  bool ok = true;  // passes the tolerance (always true in report-only mode)
};

struct Report {
  Tolerance tolerance;
  std::vector<StepComparison> steps;  // in step order
  double max_abs_diff = 0;
  int max_abs_diff_step = 0;  // 0 when no steps
  double mean_abs_diff = 0;
  double max_rel_diff = 0;  // |diff| / |baseline|
  int bitwise_equal_steps = 0;
  std::vector<int> failed_steps;

  bool passed() const { return failed_steps.empty(); }
};

// Compares step by step. A NaN loss on either side fails any check. FAILED_PRECONDITION (naming the
// side and the step) when the two do not hold the same steps.
absl::StatusOr<Report> CompareLosses(const StepLosses& baseline, const StepLosses& test,
                                     const Tolerance& tolerance);

// One line: PASS/FAIL/REPORT ONLY and why.
std::string Verdict(const Report& report);

// The table (Step | Baseline Loss | Test Loss | Difference), the summary statistics, the failed
// steps and the verdict, as printed.
std::string FormatReport(const Report& report);

// summary.json's pieces. ToleranceJson: "mode" (report_only | assert_equal | tolerance), "rtol",
// "atol". SideJson: config, options, log, jsonl, exit_code, seconds, and "overrides" + job_id on
// the service or "command" + nproc locally. ReportJson: "verdict", "statistics", "failed_steps"
// and "per_step" (step, baseline_loss, test_loss, diff, bitwise_equal, ok).
nlohmann::json ToleranceJson(const Tolerance& tolerance);
nlohmann::json SideJson(const LossCompareSide& side, bool service);
nlohmann::json ReportJson(const Report& report);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_LOSS_COMPARE_H_
