#include "client/tensorboard_command.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

#include "client/coordinator_client.h"
#include "client/exit_codes.h"
#include "client/job_format.h"
#include "client/job_steps.h"
#include "common/record/step_record.h"
#include "common/tensorboard/event_file.h"
#include "common/tensorboard/step_scalars.h"

namespace ringtrain {

CLI::App* AddTensorboardCommand(CLI::App& app, TensorboardFlags* flags) {
  CLI::App* cmd = app.add_subcommand(
      "tensorboard",
      "Write a job's stored steps as TensorBoard event files in DIR/JOB (the scalars the trainer "
      "writes with [metrics] enable_tensorboard: loss, grad norm, lr, tokens/s, step time, "
      "memory, validation loss); then `tensorboard --logdir DIR`.");
  cmd->add_option("JOB", flags->job_id, "The job id")->required();
  cmd->add_option("--out", flags->out, "The log folder (made when missing)")->required();
  cmd->footer(
      "Example:\n"
      "  ringctl tensorboard job-000001 --out runs && tensorboard --logdir runs");
  return cmd;
}

int RunTensorboard(const TensorboardFlags& flags) {
  CoordinatorClient client(flags.coordinator);
  const absl::StatusOr<JobSteps> fetched = FetchJobSteps(client, flags.job_id);
  if (!fetched.ok()) {
    std::cerr << CommandErrorLine("tensorboard", fetched.status(), flags.job_id) << std::endl;
    return ExitCodeFor(fetched.status());
  }
  const v1::Job& job = fetched->job;
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer =
      EventFileWriter::Open(flags.out + "/" + job.job_id());
  if (!writer.ok()) {
    std::cerr << "ringctl tensorboard: --out " << flags.out << ": " << writer.status().message()
              << std::endl;
    return kExitUsage;
  }
  const double started = job.has_started_time() ? double(job.started_time().seconds()) +
                                                      job.started_time().nanos() * 1e-9
                                                : WallTimeNow();
  for (const v1::StepEvent& event : fetched->steps) {
    // The trainer's record (StepRecordLine falls back to the event's own fields).
    const absl::StatusOr<std::optional<StepRecord>> record =
        ParseStepRecord(StepRecordLine(event), MissingFigure::kZero);
    if (!record.ok() || !record->has_value()) continue;
    const StepRecord& r = **record;
    const absl::Status written =
        (*writer)->WriteScalars(r.step, started + r.elapsed_seconds, StepScalars(r));
    if (!written.ok()) {
      std::cerr << "ringctl tensorboard: " << written.message() << std::endl;
      return kExitUsage;
    }
  }
  std::cout << "wrote " << (*writer)->path() << " (" << fetched->steps.size() << " step"
            << (fetched->steps.size() == 1 ? "" : "s") << " of " << job.job_id() << ", "
            << JobStateName(job.state()) << "); open it with: tensorboard --logdir " << flags.out
            << std::endl;
  return kExitOk;
}

}  // namespace ringtrain
