#include "client/export_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "client/coordinator_client.h"
#include "client/exit_codes.h"
#include "client/job_format.h"
#include "client/job_steps.h"

namespace ringtrain {

CLI::App* AddExportCommand(CLI::App& app, ExportFlags* flags) {
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a job's step records as JSONL (one line per step, the trainer's own record, as "
      "ringtrain-run --metrics.jsonl writes it): all of a finished job, the steps so far of a "
      "running one.");
  cmd->add_option("JOB", flags->job_id, "The job id")->required();
  cmd->add_option("--out", flags->out, "The file to write (default: stdout)");
  cmd->add_option("--from-step", flags->from_step, "First step to write (0: the whole history)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--output", flags->output_asked,
                  "Not needed: export always writes JSONL (one JSON record per line)");
  cmd->footer(
      "Examples:\n"
      "  ringctl export job-000001 --out job-000001.jsonl\n"
      "  ringctl export job-000001 | jq .loss");
  return cmd;
}

int RunExport(const ExportFlags& flags) {
  if (!flags.output_asked.empty()) {
    const bool json = flags.output_asked == "json" || flags.output_asked == "jsonl";
    std::cerr << "ringctl export: export always writes JSONL, one JSON record per line (the "
                 "trainer's own, as ringtrain-run --metrics.jsonl writes it); "
              << (json ? "--output is not needed"
                       : "--output " + flags.output_asked + " is not a format it writes")
              << std::endl;
    if (!json) return kExitUsage;
  }
  CoordinatorClient client(flags.coordinator);
  const absl::StatusOr<JobSteps> fetched = FetchJobSteps(client, flags.job_id, flags.from_step);
  if (!fetched.ok()) {
    std::cerr << CommandErrorLine("export", fetched.status(), flags.job_id) << std::endl;
    return ExitCodeFor(fetched.status());
  }
  std::string text;
  for (const v1::StepEvent& event : fetched->steps) text += StepRecordLine(event) + "\n";
  if (flags.out.empty() || flags.out == "-") {
    std::cout << text << std::flush;
    return kExitOk;
  }
  const std::string temporary = flags.out + ".tmp";
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out || std::rename(temporary.c_str(), flags.out.c_str()) != 0) {
    std::remove(temporary.c_str());
    std::cerr << "ringctl export: cannot write --out " << flags.out
              << ": check that its folder exists and is writable" << std::endl;
    return kExitUsage;
  }
  std::cout << "wrote " << flags.out << " (" << fetched->steps.size() << " step"
            << (fetched->steps.size() == 1 ? "" : "s") << " of " << fetched->job.job_id() << ", "
            << JobStateName(fetched->job.state()) << ")" << std::endl;
  return kExitOk;
}

}  // namespace ringtrain
