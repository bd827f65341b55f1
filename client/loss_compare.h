// `ringctl loss-compare`: runs a baseline and a test training configuration with the same seed
// and deterministic settings, and compares their per-step losses (torchtitan's
// scripts/loss_compare.py). Locally each side runs under ringtrain-run (loss_compare_local.h);
// with --coordinator each is a job on the cluster (loss_compare_service.h). The pieces are separate
// so the comparison is testable without processes: flags → ValidateFlags → BuildRunArgs /
// BuildJobOverrides → (runs) → ReadStepLosses (client/jsonl.h) → CheckSteps → CompareLosses →
// FormatReport.
//
// With --coordinator the world size of a side is the config's dp × cp (the parallelism keys, set
// with --baseline-options/--test-options), so --baseline-nproc/--test-nproc must stay 1: the
// service cannot honour a rank count that disagrees with the config, and guessing a dp from it
// would hide the mistake.
#ifndef RINGTRAIN_CLIENT_LOSS_COMPARE_H_
#define RINGTRAIN_CLIENT_LOSS_COMPARE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/exit_codes.h"
#include "client/jsonl.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

// Exit codes of `ringctl loss-compare` (client/exit_codes.h): kExitOk; kExitMismatch for a loss
// mismatch or a failed run; kExitUsage for bad or conflicting flags, a missing config or launcher,
// or a config the coordinator rejected; kExitUnreachable when the coordinator cannot be reached.

struct LossCompareFlags {
  std::string baseline_config = "configs/debug_model.toml";
  std::string test_config;  // empty: the baseline config
  std::string baseline_options;  // override args, split on whitespace
  std::string test_options;
  int baseline_nproc = 1;
  int test_nproc = 1;
  int steps = 0;  // required
  int seed = 42;
  bool assert_equal = false;
  std::optional<double> rtol;
  std::optional<double> atol;
  std::string output_folder;  // empty: a new ./outputs/loss_compare-<UTC timestamp>
  std::string run;            // empty: ringtrain-run next to this executable
  std::string coordinator;    // non-empty: run both sides as jobs on this coordinator
  std::string device_kind;    // with --coordinator: "cpu" | "cuda" | empty (the coordinator's)
};

// Adds the `loss-compare` subcommand to `app`; parsing fills `*flags`, which must outlive `app`.
// Returns the subcommand.
CLI::App* AddLossCompareCommand(CLI::App& app, LossCompareFlags* flags);

// Checks the flags together (the nproc flags must be 1 with --coordinator; --run and --device-kind
// belong to one mode each). INVALID_ARGUMENT naming the flag, its value and what would work.
absl::Status ValidateFlags(const LossCompareFlags& flags);

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
Tolerance ToleranceFromFlags(const LossCompareFlags& flags);

// Splits an options string on whitespace into override args (no quoting).
std::vector<std::string> SplitOptions(absl::string_view options);

// One ringtrain-run invocation.
struct RunSpec {
  std::string run_path;  // the launcher
  int nproc = 1;
  std::string config;
  std::string options;  // the user's overrides, as typed
  int steps = 0;
  std::string jsonl_path;
  int seed = 42;
};

// argv for one run: launcher, --nproc, config, the user's overrides, and then — last, so they win —
// --training.steps, --metrics.jsonl, --checkpoint.enable=false and --training.seed.
std::vector<std::string> BuildRunArgs(const RunSpec& spec);

// The overrides of one side's job with --coordinator, as SubmitJobRequest.overrides: the user's
// options with their leading "--" stripped, then — last, so they win — training.steps,
// checkpoint.enable=false and training.seed (the JSONL is the agent's business on the service).
std::vector<std::string> BuildJobOverrides(absl::string_view options, int steps, int seed);

// OK if `losses` holds exactly steps 1..steps; otherwise FAILED_PRECONDITION naming `side` and the
// first missing (or unexpected) step.
absl::Status CheckSteps(const StepLosses& losses, int steps, absl::string_view side);

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

// The table (Step | Baseline Loss | Test Loss | Difference), the summary statistics, the failed steps
// and the verdict, as printed.
std::string FormatReport(const Report& report);

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

// ReadStepLosses(side.jsonl_path) then CheckSteps; errors name the side and point at its log.
absl::StatusOr<StepLosses> ReadSideLosses(const LossCompareSide& side, int steps);

// Runs the whole command: validates, runs baseline then test, compares, prints, writes
// OUTPUT/summary.json. Returns the exit code.
int RunLossCompare(const LossCompareFlags& flags);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_LOSS_COMPARE_H_
