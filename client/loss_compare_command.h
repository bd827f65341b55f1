// `ringctl loss-compare`: runs a baseline and a test training configuration with the same seed
// and deterministic settings, and compares their per-step losses (torchtitan's
// scripts/loss_compare.py). Locally each side runs under ringtrain-run (loss_compare_local.h);
// with --coordinator each is a job on the cluster (loss_compare_service.h); the comparison itself
// is client/loss_compare.h. The pieces are separate so the command is testable without processes:
// flags → ValidateFlags → BuildRunArgs / BuildJobOverrides → (runs) → ReadSideLosses →
// CompareLosses → FormatReport.
//
// With --coordinator the world size of a side is the config's dp × cp (the parallelism keys, set
// with --baseline-options/--test-options), so --baseline-nproc/--test-nproc must stay 1: the
// service cannot honour a rank count that disagrees with the config, and guessing a dp from it
// would hide the mistake.
#ifndef RINGTRAIN_CLIENT_LOSS_COMPARE_COMMAND_H_
#define RINGTRAIN_CLIENT_LOSS_COMPARE_COMMAND_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/exit_codes.h"
#include "client/loss_compare.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

// Exit codes of `ringctl loss-compare` (client/exit_codes.h): kExitOk; kExitMismatch for a loss
// mismatch or a failed run; kExitUsage for bad or conflicting flags, a missing config or launcher,
// or a config the coordinator rejected; kExitUnreachable when the coordinator cannot be reached.

struct LossCompareFlags {
  std::string baseline_config = "configs/debug_model.toml";
  std::string test_config;       // empty: the baseline config
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

// The check --assert-equal or --rtol/--atol ask for (report-only without them).
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

// Runs the whole command: validates, runs baseline then test, compares, prints, writes
// OUTPUT/summary.json. Returns the exit code.
int RunLossCompare(const LossCompareFlags& flags);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_LOSS_COMPARE_COMMAND_H_
