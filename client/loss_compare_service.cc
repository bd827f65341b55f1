#include "client/loss_compare_service.h"

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/job_format.h"
#include "client/job_steps.h"
#include "client/watch.h"

namespace ringtrain {

absl::StatusOr<StepLosses> RunSideAsJob(CoordinatorClient& client, LossCompareSide* side, int steps,
                                        const std::string& device_kind) {
  std::ifstream in(side->config, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(side->name, ": cannot read ", side->config));
  std::stringstream text;
  text << in.rdbuf();
  v1::SubmitJobRequest request;
  request.set_config_toml(text.str());
  for (const std::string& o : side->argv) request.add_overrides(o);
  request.set_name(absl::StrCat("loss-compare-", side->name));
  request.set_device_kind(device_kind);

  std::cout << side->name << ": " << side->config << " " << absl::StrJoin(side->argv, " ")
            << "\n  (on the coordinator at " << client.address() << "; log: " << side->log_path
            << ")" << std::endl;
  CallOptions submit_options;
  submit_options.timeout = std::chrono::seconds(10);
  const absl::StatusOr<v1::Job> submitted = client.SubmitJob(request, submit_options);
  if (!submitted.ok()) {
    return absl::Status(submitted.status().code(),
                        absl::StrCat(side->name, ": ", submitted.status().message()));
  }
  side->job_id = submitted->job_id();
  std::cout << "  " << side->name << ": submitted " << side->job_id << " ("
            << MeshSummary(*submitted) << "); Ctrl-C leaves it running: `ringctl cancel "
            << side->job_id << "`" << std::endl;

  std::ofstream jsonl(side->jsonl_path, std::ios::trunc);
  std::ofstream log(side->log_path, std::ios::trunc);
  if (!jsonl || !log) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", side->jsonl_path, " or ", side->log_path));
  }
  WatchPrinter to_log(OutputFormat::kTable, &log, /*terminal=*/false,
                      WatchPrinter::Steps::kEveryStep);
  to_log.set_total_steps(submitted->total_steps());
  WatchPrinter to_terminal(OutputFormat::kTable, &std::cout, isatty(STDOUT_FILENO) == 1,
                           WatchPrinter::Steps::kTerminalOnly);
  FollowOptions follow;
  follow.on_step = [&](const v1::StepEvent& event) {
    jsonl << StepRecordLine(event) << "\n" << std::flush;
    to_log.OnStep(event);
  };
  follow.on_state = [&](const v1::StateChange& change) { to_log.OnState(change); };
  const auto start = std::chrono::steady_clock::now();
  const absl::StatusOr<v1::Job> job = FollowJob(client, side->job_id, follow, &to_terminal);
  side->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  jsonl.close();
  if (!job.ok()) {
    return absl::Status(job.status().code(), absl::StrCat(side->name, " (", side->job_id,
                                                          "): ", job.status().message()));
  }
  if (job->state() != v1::JOB_STATE_SUCCEEDED) {
    const std::string error = FormatJobError(*job);
    log << error;
    std::cerr << error;
    side->exit_code = job->error().exit_status() != 0 ? job->error().exit_status() : 1;
    return absl::AbortedError(absl::StrCat(
        side->name, " job ", side->job_id, " ended ", JobStateName(job->state()), " after ",
        absl::StrFormat("%.1f", side->seconds), " s; see ", side->log_path));
  }
  side->exit_code = 0;
  std::cout << absl::StrFormat("  %s: %s finished in %.1f s", side->name, side->job_id,
                               side->seconds)
            << std::endl;
  absl::StatusOr<StepLosses> losses = ReadSideLosses(*side, steps);
  if (!losses.ok() && losses.status().code() == absl::StatusCode::kInvalidArgument) {
    // A malformed record is the service's fault, not the command line's (exit 1, not 2).
    return absl::DataLossError(losses.status().message());
  }
  return losses;
}

}  // namespace ringtrain
