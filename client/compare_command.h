// `ringctl compare JOB_A JOB_B [--assert-equal | --rtol X --atol Y]`: the stored step losses of two
// jobs (finished or running) compared with loss-compare's table, statistics, verdict and exit
// statuses (client/loss_compare.h), JOB_A as the baseline. Nothing runs: the losses are the
// trainers' own records from the coordinator's store (client/job_steps.h), bit-exact.
#ifndef RINGTRAIN_CLIENT_COMPARE_COMMAND_H_
#define RINGTRAIN_CLIENT_COMPARE_COMMAND_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/command.h"
#include "client/job_steps.h"
#include "client/loss_compare.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

struct CompareFlags : CommonFlags {
  std::string baseline_job;
  std::string test_job;
  bool assert_equal = false;
  std::optional<double> rtol;
  std::optional<double> atol;
};

// Adds the `compare` subcommand to `app`; parsing fills `*flags`, which must outlive `app`.
CLI::App* AddCompareCommand(CLI::App& app, CompareFlags* flags);

struct JobComparison {
  Report report;  // over the steps both jobs hold
  // Lines about what was not compared, e.g. "job-000002 is RUNNING: steps 1–7 so far".
  std::vector<std::string> notes;
  // Both jobs have finished yet hold different steps: they did not train the same run, so a check
  // (--assert-equal, --rtol/--atol) fails whatever the common steps say.
  bool finished_with_different_steps = false;
  // The validation losses ([validation] enable) at the steps both jobs validated, with the same
  // tolerance; nullopt when they have none in common.
  std::optional<Report> validation;

  bool passed() const;
};

// Compares the losses of the steps both hold (step events' losses, bit-exact). FAILED_PRECONDITION
// when they have no step in common, saying which steps each holds.
absl::StatusOr<JobComparison> CompareJobSteps(const JobSteps& baseline, const JobSteps& test,
                                              const Tolerance& tolerance);

// Fetches both jobs, compares, prints "baseline: JOB (NAME), STATE, N steps" and the same for test,
// the notes and FormatReport's table (or, with --output json, one object: "baseline", "test",
// "notes", the tolerance and ReportJson's fields). Exit statuses (client/exit_codes.h): 0 when the
// check passes (or none was asked for), 1 on a mismatch, no common step or an unknown job, 2 for
// bad flags, 3 when the coordinator cannot be reached.
int RunCompare(const CompareFlags& flags);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_COMPARE_COMMAND_H_
