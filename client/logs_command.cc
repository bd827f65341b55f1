#include "client/logs_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/coordinator_client.h"
#include "client/exit_codes.h"
#include "client/job_format.h"
#include "common/grpc/client_util.h"
#include "common/printable.h"

namespace ringtrain {
namespace {

constexpr int kStreamRetries = 5;
// A snapshot (no --follow) of even a long log comes in well within this.
constexpr std::chrono::seconds kSnapshotDeadline{120};

std::string LineTime(const google::protobuf::Timestamp& time, bool json) {
  const absl::Time t = absl::FromUnixSeconds(time.seconds()) + absl::Nanoseconds(time.nanos());
  return absl::FormatTime(json ? "%Y-%m-%dT%H:%M:%E6SZ" : "%Y-%m-%d %H:%M:%E6S", t,
                          absl::UTCTimeZone());
}

void Print(const LogsFlags& flags, const v1::StreamLogsResponse& response) {
  for (const v1::LogLine& line : response.lines()) {
    if (flags.output == "json") {
      nlohmann::json out = {{"job_id", flags.job_id},
                            {"rank", flags.rank},
                            {"worker_id", response.worker_id()},
                            {"time", LineTime(line.time(), true)},
                            {"stream", line.stream()},
                            {"text", line.text()},
                            {"offset", line.offset()}};
      std::cout << out.dump() << "\n";
    } else {
      std::cout << LineTime(line.time(), false) << "  " << EscapeForTerminal(line.stream()) << "  "
                << EscapeForTerminal(line.text()) << "\n";
    }
  }
  std::cout.flush();
}

// One StreamLogs call from `*offset` (0: per --tail); advances `*offset` past what it printed.
absl::Status StreamOnce(CoordinatorClient& client, const LogsFlags& flags, int64_t* offset) {
  v1::StreamLogsRequest request;
  request.set_job_id(flags.job_id);
  request.set_rank(flags.rank);
  request.set_tail_lines(static_cast<int32_t>(std::min<int64_t>(flags.tail, INT32_MAX)));
  request.set_follow(flags.follow);
  request.set_from_offset(*offset);
  grpc::ClientContext context;
  // Following has no end in sight; a snapshot does.
  if (!flags.follow) context.set_deadline(DeadlineIn(kSnapshotDeadline));
  std::unique_ptr<grpc::ClientReader<v1::StreamLogsResponse>> reader =
      client.stub().StreamLogs(&context, request);
  v1::StreamLogsResponse response;
  while (reader->Read(&response)) {
    Print(flags, response);
    *offset = response.next_offset();
  }
  const grpc::Status status = reader->Finish();
  return status.ok() ? absl::OkStatus() : client.CallFailed(status);
}

}  // namespace

CLI::App* AddLogsCommand(CLI::App& app, LogsFlags* flags) {
  CLI::App* cmd = app.add_subcommand(
      "logs", "A rank's output (its trainer's stdout and stderr, timestamped), from its worker");
  cmd->add_option("job", flags->job_id, "Job id (from submit or list)")->required();
  cmd->add_option("--rank", flags->rank, "The rank (0 .. world size - 1)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("-f,--follow", flags->follow, "Keep printing new lines until the rank ends");
  cmd->add_option("--tail", flags->tail, "Only the last N lines (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->footer(
      "Examples:\n"
      "  ringctl logs job-000001 --rank 1 --follow\n"
      "  ringctl logs job-000001 --tail 50");
  return cmd;
}

int RunLogs(const LogsFlags& flags) {
  CoordinatorClient client(flags.coordinator);
  // A unary call first: an unreachable coordinator or unknown job is reported plainly.
  if (absl::StatusOr<v1::Job> job = client.GetJob(flags.job_id); !job.ok()) {
    std::cerr << CommandErrorLine("logs", job.status(), flags.job_id) << std::endl;
    return ExitCodeFor(job.status());
  }
  int64_t offset = 0;
  int failures = 0;
  bool told_waiting = false;
  for (;;) {
    const int64_t before = offset;
    const absl::Status status = StreamOnce(client, flags, &offset);
    if (status.ok()) return kExitOk;
    if (offset > before) failures = 0;  // it made progress: a fresh budget of tries
    bool placeable = false;             // not placed yet, and it still may be: wait for it
    if (absl::IsFailedPrecondition(status)) {
      const absl::StatusOr<v1::Job> job = client.GetJob(flags.job_id);
      placeable = job.ok() && job->state() != v1::JOB_STATE_SUCCEEDED &&
                  job->state() != v1::JOB_STATE_FAILED && job->state() != v1::JOB_STATE_CANCELLED;
    }
    const bool retry = flags.follow &&
                       (placeable || (absl::IsUnavailable(status) && ++failures <= kStreamRetries));
    if (!retry) {
      std::cerr << CommandErrorLine("logs", status, flags.job_id) << std::endl;
      return ExitCodeFor(status);
    }
    if (absl::IsFailedPrecondition(status) && !told_waiting) {
      std::cerr << "ringctl logs: " << flags.job_id << " rank " << flags.rank
                << " has not been placed yet; waiting" << std::endl;
      told_waiting = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(
        absl::IsFailedPrecondition(status) ? 1000 : 250 << std::min(failures, 4)));
  }
}

}  // namespace ringtrain
