// ringctl's job service subcommands — submit, watch, get, list, cancel, workers — which talk to
// ringtrain-coordinator's JobService (client/coordinator_client.h). Each is a row of the command
// table (client/commands.cc) that calls a coordinator, takes the credentials and prints table or
// json: `--coordinator ADDR` (default $RINGTRAIN_COORDINATOR, else 127.0.0.1:50051; before or after
// the subcommand: client/global_flags.h) and `--output table|json` (default table).
// Exit statuses are client/exit_codes.h's.
#ifndef RINGTRAIN_CLIENT_SERVICE_COMMANDS_H_
#define RINGTRAIN_CLIENT_SERVICE_COMMANDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/command.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

struct SubmitFlags : CommonFlags {
  std::string config;       // the TOML file
  std::string name;         // empty: the coordinator picks one
  std::string device_kind;  // empty: the coordinator's default ("cpu")
  bool follow = false;
  std::string init_from;             // --init-from JOB[@STEP]: the weights alone
  std::string resume_from;           // --resume-from JOB[@STEP]: the whole training state
  bool cancel_on_interrupt = false;  // with --follow: Ctrl-C cancels the job
  CLI::App* submit = nullptr;        // for its extra `--section.key=value` args
};

// watch, get, cancel: one job.
struct JobFlags : CommonFlags {
  std::string job_id;
  int64_t from_step = 0;             // watch
  bool cancel_on_interrupt = false;  // watch: Ctrl-C cancels the job
};

struct ListFlags : CommonFlags {
  std::vector<std::string> states;  // --state, any case, commas allowed
  std::string name;                 // --name: a substring of the job's name
};

struct WorkersFlags : CommonFlags {
  int wait = 0;         // 0: list once
  double timeout = 60;  // seconds, with --wait
};

// Each adds its subcommand to `app`; parsing fills `*flags`, which must outlive `app`. Each Run
// returns the exit status.
CLI::App* AddSubmitCommand(CLI::App& app, SubmitFlags* flags);
int RunSubmit(const SubmitFlags& flags);
CLI::App* AddWatchCommand(CLI::App& app, JobFlags* flags);
int RunWatchCommand(const JobFlags& flags);
CLI::App* AddGetCommand(CLI::App& app, JobFlags* flags);
int RunGet(const JobFlags& flags);
CLI::App* AddListCommand(CLI::App& app, ListFlags* flags);
int RunList(const ListFlags& flags);
CLI::App* AddCancelCommand(CLI::App& app, JobFlags* flags);
int RunCancel(const JobFlags& flags);
CLI::App* AddWorkersCommand(CLI::App& app, WorkersFlags* flags);
int RunWorkers(const WorkersFlags& flags);

// The overrides of `submit` from its extra command-line args, as SubmitJobRequest wants them:
// "--section.key=value" → "section.key=value"; "--section.key value" (two args) is joined. A bare
// "section.key=value" is accepted too. INVALID_ARGUMENT naming the arg for anything else.
absl::StatusOr<std::vector<std::string>> OverridesFromArgs(const std::vector<std::string>& args);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_SERVICE_COMMANDS_H_
