#include "client/checkpoints_command.h"

#include <CLI/CLI.hpp>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "client/checkpoint_format.h"
#include "client/coordinator_client.h"
#include "client/exit_codes.h"
#include "client/job_format.h"

namespace ringtrain {
CLI::App* AddCheckpointsCommand(CLI::App& app, CheckpointsFlags* flags) {
  CLI::App* command = app.add_subcommand(
      "checkpoints",
      "List a job's checkpoints: step, complete or not, and the step folder under the workers' "
      "--checkpoint-root. A complete one can start another job: `ringctl submit CONFIG "
      "--init-from JOB@STEP` (the weights) or `--resume-from JOB@STEP` (the whole training "
      "state).");
  command->add_option("JOB", flags->job_id, "The job's id")->required();
  return command;
}

int RunCheckpoints(const CheckpointsFlags& flags) {
  CoordinatorClient client(flags.coordinator);
  const absl::StatusOr<v1::Job> job = client.GetJob(flags.job_id);
  if (!job.ok()) {
    std::cerr << CommandErrorLine("checkpoints", job.status(), flags.job_id) << std::endl;
    return ExitCodeFor(job.status());
  }
  if (flags.output == "json") {
    std::vector<const google::protobuf::Message*> messages;
    for (const v1::Checkpoint& c : job->checkpoints()) messages.push_back(&c);
    std::cout << MessageJsonArray(messages) << std::endl;
  } else {
    std::cout << FormatCheckpointTable(*job) << std::flush;
  }
  return kExitOk;
}

}  // namespace ringtrain
