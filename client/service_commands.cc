#include "client/service_commands.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/checkpoint_format.h"
#include "client/coordinator_client.h"
#include "client/exit_codes.h"
#include "client/job_filter.h"
#include "client/job_format.h"
#include "client/validation_view.h"
#include "client/watch.h"
#include "common/printable.h"

namespace ringtrain {
namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

OutputFormat FormatOf(const CommonFlags& flags) {
  return flags.output == "json" ? OutputFormat::kJson : OutputFormat::kTable;
}

// Prints a failed call (CommandErrorLine) and returns its exit status.
int Report(absl::string_view command, const absl::Status& status, const std::string& job_id = "") {
  std::cerr << CommandErrorLine(command, status, job_id) << std::endl;
  return ExitCodeFor(status);
}

// An override's key: the part before '=', without leading dashes; "" if it is not "section.key".
std::string OverrideKey(absl::string_view arg) {
  absl::string_view key = arg.substr(0, arg.find('='));
  while (absl::ConsumePrefix(&key, "-")) {
  }
  const size_t dot = key.find('.');
  return dot == absl::string_view::npos || dot == 0 || dot + 1 == key.size() ? ""
                                                                             : std::string(key);
}

}  // namespace

int RunSubmit(const SubmitFlags& flags) {
  const absl::StatusOr<std::vector<std::string>> overrides =
      OverridesFromArgs(flags.submit->remaining());
  if (!overrides.ok()) return Report("submit", overrides.status());
  std::ifstream in(flags.config, std::ios::binary);
  if (!in) {
    std::cerr << "ringctl submit: cannot read config " << flags.config
              << ": no such file (give the path of a TOML job config, e.g. "
                 "configs/debug_model.toml)"
              << std::endl;
    return kExitUsage;
  }
  std::stringstream text;
  text << in.rdbuf();
  v1::SubmitJobRequest request;
  request.set_config_toml(text.str());
  for (const std::string& o : *overrides) request.add_overrides(o);
  request.set_name(flags.name);
  request.set_device_kind(flags.device_kind);
  request.set_init_from(flags.init_from);
  request.set_resume_from(flags.resume_from);

  CoordinatorClient client(flags.coordinator);
  CallOptions options;
  options.timeout = std::chrono::seconds(10);  // the coordinator validates the config first
  const absl::StatusOr<v1::Job> job = client.SubmitJob(request, options);
  if (!job.ok()) return Report("submit", job.status());
  if (FormatOf(flags) == OutputFormat::kJson) {
    std::cout << MessageJson(*job) << std::endl;  // the warnings are its "warnings"
  } else {
    std::cout << "submitted " << job->job_id() << " (" << MeshSummary(*job) << ")"
              << (job->has_load_from() ? ", from " + LoadFromText(*job) : "") << std::endl;
  }
  // What the coordinator accepted but changed or ignores (a key the service manages, a clamped
  // learning-rate phase): on stderr, so scripts reading stdout are not disturbed.
  for (const std::string& warning : job->warnings()) {
    std::cerr << "ringctl submit: warning: " << EscapeForTerminal(warning) << std::endl;
  }
  if (!flags.follow) return kExitOk;
  return RunWatch(client, job->job_id(), 0, FormatOf(flags), flags.cancel_on_interrupt);
}

int RunGet(const JobFlags& flags) {
  CoordinatorClient client(flags.coordinator);
  const absl::StatusOr<v1::Job> job = client.GetJob(flags.job_id);
  if (!job.ok()) return Report("get", job.status(), flags.job_id);
  // The newest validation loss ([validation] enable, or an eval job's result) from its step.
  const absl::StatusOr<std::optional<ValidationPoint>> validation =
      FetchLatestValidation(client, *job);
  if (!validation.ok()) return Report("get", validation.status(), flags.job_id);
  if (FormatOf(flags) == OutputFormat::kJson) {
    std::cout << WithValidationJson(MessageJson(*job), *validation) << std::endl;
  } else {
    std::cout << FormatJobDetail(*job, NowSeconds(),
                                 *validation ? ValidationText(**validation) : "")
              << std::flush;
  }
  return kExitOk;
}

int RunList(const ListFlags& flags) {
  const absl::StatusOr<JobFilter> filter = ParseJobFilter(flags.states, flags.name);
  if (!filter.ok()) return Report("list", filter.status());
  CoordinatorClient client(flags.coordinator);
  absl::StatusOr<std::vector<v1::Job>> jobs = client.ListJobs();
  if (!jobs.ok()) return Report("list", jobs.status());
  const bool filtered = !filter->states.empty() || !filter->name.empty();
  jobs = FilterJobs(*filter, *jobs);
  if (FormatOf(flags) == OutputFormat::kJson) {
    std::vector<const google::protobuf::Message*> messages;
    for (const v1::Job& job : *jobs) messages.push_back(&job);
    std::cout << MessageJsonArray(messages) << std::endl;
  } else if (jobs->empty()) {
    std::cout << "no jobs" << (filtered ? " that match --state/--name" : "")
              << " on the coordinator at " << flags.coordinator << std::endl;
  } else {
    std::cout << FormatJobTable(*jobs, NowSeconds()) << std::flush;
  }
  return kExitOk;
}

int RunCancel(const JobFlags& flags) {
  CoordinatorClient client(flags.coordinator);
  const absl::StatusOr<v1::Job> job = client.CancelJob(flags.job_id);
  if (!job.ok()) return Report("cancel", job.status(), flags.job_id);
  if (FormatOf(flags) == OutputFormat::kJson) {
    std::cout << MessageJson(*job) << std::endl;
  } else if (IsTerminal(job->state()) && job->state() != v1::JOB_STATE_CANCELLED) {
    // The coordinator returns a finished job as it is.
    std::cout << job->job_id() << " already finished: " << JobStateName(job->state())
              << " (nothing to cancel)" << std::endl;
  } else if (IsTerminal(job->state())) {
    std::cout << job->job_id() << ": " << JobStateName(job->state()) << std::endl;
  } else {
    std::cout << job->job_id() << ": " << JobStateName(job->state())
              << " (cancel requested; `ringctl watch " << job->job_id()
              << "` follows it to the end)" << std::endl;
  }
  return kExitOk;
}

int RunWorkers(const WorkersFlags& flags) {
  CoordinatorClient client(flags.coordinator);
  absl::StatusOr<std::vector<v1::Worker>> workers =
      flags.wait > 0 ? WaitForIdleWorkers(
                           client, flags.wait,
                           std::chrono::milliseconds(static_cast<int64_t>(flags.timeout * 1000)))
                     : client.ListWorkers();
  if (!workers.ok()) {
    // A timed-out wait is "the cluster did not come up": the unreachable status, whatever the
    // cause.
    const int code = Report("workers", workers.status());
    return flags.wait > 0 ? kExitUnreachable : code;
  }
  if (FormatOf(flags) == OutputFormat::kJson) {
    std::vector<const google::protobuf::Message*> messages;
    for (const v1::Worker& worker : *workers) messages.push_back(&worker);
    std::cout << MessageJsonArray(messages) << std::endl;
  } else if (workers->empty()) {
    std::cout << "no workers registered with the coordinator at " << flags.coordinator << std::endl;
  } else {
    std::cout << FormatWorkerTable(*workers, NowSeconds()) << std::flush;
  }
  return kExitOk;
}

int RunWatchCommand(const JobFlags& flags) {
  CoordinatorClient client(flags.coordinator);
  return RunWatch(client, flags.job_id, flags.from_step, FormatOf(flags),
                  flags.cancel_on_interrupt);
}

absl::StatusOr<std::vector<std::string>> OverridesFromArgs(const std::vector<std::string>& args) {
  std::vector<std::string> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const std::string key = OverrideKey(arg);
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected argument '", arg,
          "': after CONFIG give overrides as --section.key=value, e.g. --training.steps=20"));
    }
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      overrides.push_back(absl::StrCat(key, arg.substr(eq)));
    } else if (i + 1 < args.size() && !absl::StartsWith(args[i + 1], "-")) {
      overrides.push_back(absl::StrCat(key, "=", args[++i]));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("override '", arg, "' has no value: write --", key, "=VALUE"));
    }
  }
  return overrides;
}

CLI::App* AddSubmitCommand(CLI::App& app, SubmitFlags* flags) {
  CLI::App* submit = app.add_subcommand(
      "submit",
      "Submit a job: CONFIG (TOML) plus --section.key=value overrides. Prints the job id; with "
      "--follow, watches it like `ringctl watch` (same exit statuses).");
  submit->add_option("CONFIG", flags->config, "The job's TOML config file")->required();
  submit->add_option("--name", flags->name,
                     "A name for the job (default: chosen by the coordinator)");
  submit->add_option("--device-kind", flags->device_kind, "The kind of worker every rank runs on")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  submit->add_flag("--follow", flags->follow, "Watch the job until it ends");
  submit->add_option("--init-from", flags->init_from,
                     "Start from another job's weights, JOB or JOB@STEP (default: its newest "
                     "complete checkpoint); a fresh optimizer, from step 1");
  submit->add_option("--resume-from", flags->resume_from,
                     "Continue another job's training, JOB or JOB@STEP, under a new job id: its "
                     "model, optimizer, data position and learning-rate schedule; "
                     "training.steps is the total");
  submit
      ->add_flag("--cancel-on-interrupt", flags->cancel_on_interrupt,
                 "With --follow: Ctrl-C cancels the job (as torchrun would); without it the job "
                 "keeps running")
      ->needs("--follow");
  submit->allow_extras();  // the --section.key=value overrides, wherever they appear
  submit->footer(
      "Overrides: any config key as --section.key=value, e.g. --training.steps=20.\n"
      "Examples:\n"
      "  ringctl submit configs/debug_model.toml --parallelism.context_parallel_degree=4 --follow\n"
      "  ringctl --coordinator 10.0.0.5:50051 submit configs/debug_model.toml --name cp4 "
      "--training.steps=10\n"
      "  ringctl submit configs/debug_model.toml --resume-from job-000001@200 "
      "--training.steps=400");
  flags->submit = submit;
  return submit;
}

CLI::App* AddWatchCommand(CLI::App& app, JobFlags* flags) {
  CLI::App* watch = app.add_subcommand(
      "watch",
      "Follow a job's state changes and steps until it ends. Exit 0 if it SUCCEEDED, 1 if it "
      "FAILED or was CANCELLED, 3 if the coordinator cannot be reached.");
  watch->add_option("JOB", flags->job_id, "The job id")->required();
  watch->add_option("--from-step", flags->from_step, "First step to show (0: the whole history)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  watch->add_flag("--cancel-on-interrupt", flags->cancel_on_interrupt,
                  "Ctrl-C cancels the job (as torchrun would); without it the job keeps running "
                  "and ringctl says how to cancel it");
  watch->footer(
      "Ctrl-C stops watching and leaves the job running (exit 130).\n"
      "Examples:\n"
      "  ringctl watch job-000001\n"
      "  ringctl watch job-000001 --from-step 0 --output json > steps.jsonl");
  return watch;
}

CLI::App* AddGetCommand(CLI::App& app, JobFlags* flags) {
  CLI::App* get = app.add_subcommand("get", "Show one job: state, mesh, error, times, progress.");
  get->add_option("JOB", flags->job_id, "The job id")->required();
  get->footer("Example:\n  ringctl get job-000001 --output json");
  return get;
}

CLI::App* AddListCommand(CLI::App& app, ListFlags* flags) {
  CLI::App* list = app.add_subcommand("list", "List the coordinator's jobs, newest first.");
  list->add_option("--state", flags->states,
                   "Only jobs in these states (any case; repeat or separate with commas): queued, "
                   "assigned, running, succeeded, failed, cancelled, restarting");
  list->add_option("--name", flags->name, "Only jobs whose name contains this text");
  list->footer(
      "Examples:\n"
      "  ringctl list --state running,queued\n"
      "  RINGTRAIN_COORDINATOR=10.0.0.5:50051 ringctl list --name cp4 --state failed");
  return list;
}

CLI::App* AddCancelCommand(CLI::App& app, JobFlags* flags) {
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a job; prints its resulting state.");
  cancel->add_option("JOB", flags->job_id, "The job id")->required();
  cancel->footer("Example:\n  ringctl cancel job-000001");
  return cancel;
}

CLI::App* AddWorkersCommand(CLI::App& app, WorkersFlags* flags) {
  CLI::App* workers = app.add_subcommand(
      "workers", "List the registered workers. With --wait N, first wait until N are idle.");
  workers->add_option("--wait", flags->wait, "Wait until at least N workers are IDLE")
      ->check(CLI::NonNegativeNumber);
  workers->add_option("--timeout", flags->timeout, "Seconds to wait with --wait (then exit 3)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  workers->footer(
      "Examples:\n"
      "  ringctl workers\n"
      "  ringctl workers --wait 4 --timeout 120");
  return workers;
}

}  // namespace ringtrain
