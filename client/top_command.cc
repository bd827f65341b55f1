#include "client/top_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "client/coordinator_client.h"
#include "client/exit_codes.h"
#include "client/job_format.h"
#include "client/rank_table.h"
#include "client/validation_view.h"
#include "common/printable.h"

namespace ringtrain {
namespace {

bool IsFinal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string StateName(v1::JobState state) {
  absl::string_view name = v1::JobState_Name(state);
  absl::ConsumePrefix(&name, "JOB_STATE_");
  return std::string(name);
}

void Show(const TopFlags& flags, const v1::Job& job, v1::JobState state, const RankTable& table,
          bool live, const std::optional<ValidationPoint>& validation) {
  if (flags.output == "json") {
    std::cout << WithValidationJson(RankTableJson(job.job_id(), table), validation) << std::endl;
    return;
  }
  if (live) std::cout << "\x1b[H\x1b[2J";  // home, clear: redraw in place
  std::cout << EscapeForTerminal(job.job_id()) << " (" << EscapeForTerminal(job.name()) << ")  "
            << StateName(state) << "  step " << table.step << "/" << job.total_steps() << "  "
            << MeshSummary(job) << absl::StrFormat("  step time %.3f s\n", table.step_seconds)
            << (validation ? ValidationText(*validation) + "\n" : "") << FormatRankTable(table);
  std::cout.flush();
}

}  // namespace

CLI::App* AddTopCommand(CLI::App& app, TopFlags* flags) {
  CLI::App* cmd = app.add_subcommand(
      "top", "A live table of a job's ranks: attention, waits, bytes sent, memory, CP imbalance");
  cmd->alias("ranks");
  cmd->add_option("job", flags->job_id, "Job id (from submit or list)")->required();
  cmd->add_flag("--once", flags->once, "Print one snapshot of the latest step and exit");
  cmd->footer(
      "Examples:\n"
      "  ringctl top job-000001\n"
      "  ringctl top job-000001 --once --output json");
  return cmd;
}

int RunTop(const TopFlags& flags) {
  CoordinatorClient client(flags.coordinator);
  absl::StatusOr<v1::Job> job = client.GetJob(flags.job_id);
  if (!job.ok()) {
    std::cerr << CommandErrorLine("top", job.status(), flags.job_id) << std::endl;
    return ExitCodeFor(job.status());
  }
  const bool live = !flags.once && isatty(STDOUT_FILENO) == 1;
  v1::JobState state = job->state();
  // The newest validation so far (none: the line is left out), then each new one as it comes.
  absl::StatusOr<std::optional<ValidationPoint>> validation = FetchLatestValidation(client, *job);
  if (!validation.ok()) validation = std::optional<ValidationPoint>();
  // From the last step the coordinator has: its record is the first step event (the replay of
  // the steps before it is skipped), then the live ones.
  std::unique_ptr<JobEventStream> stream =
      client.WatchJob(flags.job_id, std::max<int64_t>(job->last_step(), 1));
  bool shown = false;
  absl::Status bad_record;
  v1::JobEvent event;
  while (stream->Next(&event)) {
    if (event.has_state_change()) {
      // The replay starts with the job's history (QUEUED → … → RUNNING); a job already finished
      // keeps the final state GetJob gave.
      if (!IsFinal(job->state())) state = event.state_change().to_state();
      continue;
    }
    absl::StatusOr<RankTable> table = RankTableFromRecord(event.step().record_json(), job->cp());
    if (!table.ok()) {
      bad_record = table.status();
      continue;
    }
    if (const std::optional<double> loss = ValidationLossOf(event.step())) {
      *validation = ValidationPoint{event.step().step(), *loss};
    }
    Show(flags, *job, state, *table, live, *validation);
    shown = true;
    if (!live) break;
  }
  stream->Cancel();
  const absl::Status ended = stream->Finish();
  if (!shown) {
    const absl::Status why =
        !bad_record.ok() ? bad_record
        : !ended.ok() && !absl::IsCancelled(ended)
            ? ended
            : absl::FailedPreconditionError(
                  absl::StrCat(flags.job_id, " is ", StateName(state), " and reported no step"));
    std::cerr << CommandErrorLine("top", why, flags.job_id) << std::endl;
    return ExitCodeFor(why);
  }
  if (live && !IsFinal(state) && !ended.ok() && !absl::IsCancelled(ended)) {
    std::cerr << CommandErrorLine("top", ended, flags.job_id) << std::endl;
    return ExitCodeFor(ended);
  }
  return kExitOk;
}

}  // namespace ringtrain
