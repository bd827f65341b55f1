// ringctl's service subcommands — submit, watch, get, list, cancel, workers, up, plot — which talk
// to ringtrain-coordinator's JobService (client/coordinator_client.h). Every one accepts
// `--coordinator ADDR` (default $RINGTRAIN_COORDINATOR, else 127.0.0.1:50051; before or after the
// subcommand: client/global_flags.h) and all but `plot` (client/plot.h), which writes a file,
// `--output table|json` (default table).
// Exit statuses are client/exit_codes.h's.
#ifndef RINGTRAIN_CLIENT_SERVICE_COMMANDS_H_
#define RINGTRAIN_CLIENT_SERVICE_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cluster_up.h"
#include "client/plot.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

inline constexpr char kDefaultCoordinator[] = "127.0.0.1:50051";

// What the service subcommands parse into. One struct for all: a run uses only its own fields.
struct ServiceFlags {
  std::string coordinator = kDefaultCoordinator;
  std::string output = "table";  // "table" | "json"

  // submit
  std::string config;       // the TOML file
  std::string name;         // empty: the coordinator picks one
  std::string device_kind;  // empty: the coordinator's default ("cpu")
  bool follow = false;
  CLI::App* submit = nullptr;  // for its extra `--section.key=value` args

  // list
  std::vector<std::string> list_states;  // --state, any case, commas allowed
  std::string list_name;                 // --name: a substring of the job's name

  // watch, get, cancel
  std::string job_id;
  int64_t from_step = 0;

  // workers
  int wait = 0;         // 0: list once
  double timeout = 60;  // seconds, with --wait

  // up
  UpFlags up;

  // plot (its --coordinator defaults to `coordinator`'s default)
  PlotFlags plot;
};

// A registered subcommand and how to run it once parsed.
struct ServiceCommand {
  CLI::App* app;
  std::function<int()> run;  // returns the exit status
};

// Adds the service subcommands to `app`; parsing fills `*flags`, which must outlive `app`.
std::vector<ServiceCommand> AddServiceCommands(CLI::App& app, ServiceFlags* flags);

// The overrides of `submit` from its extra command-line args, as SubmitJobRequest wants them:
// "--section.key=value" → "section.key=value"; "--section.key value" (two args) is joined. A bare
// "section.key=value" is accepted too. INVALID_ARGUMENT naming the arg for anything else.
absl::StatusOr<std::vector<std::string>> OverridesFromArgs(const std::vector<std::string>& args);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_SERVICE_COMMANDS_H_
