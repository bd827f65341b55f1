// ringctl: the ringtrain command-line client. One subcommand per verb; each registers its flags on
// the shared CLI11 app and says how to run once parsed. Never links LibTorch.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "client/compare_command.h"
#include "client/coordinator_client.h"
#include "client/coordinator_flag.h"
#include "client/exit_codes.h"
#include "client/export_command.h"
#include "client/logs_command.h"
#include "client/loss_compare_command.h"
#include "client/plan_command.h"
#include "client/service_commands.h"
#include "client/top_command.h"

namespace {

struct Subcommand {
  CLI::App* app;
  std::function<int()> run;  // returns the exit code
};

// How ringctl reaches a coordinator that serves TLS or wants a token: every subcommand takes them,
// each with an environment variable that stands in for it (a token only from a file or the
// environment, never from the command line, where `ps` would show it).
struct CredentialFlags {
  ringtrain::ClientTlsFiles tls;
  std::string token_file;
};

void AddCredentialFlags(CLI::App* command, CredentialFlags* flags) {
  command->add_option("--tls-ca", flags->tls.ca,
                      "PEM CA that signed the coordinator's certificate (TLS)")
      ->envname("RINGTRAIN_TLS_CA");
  command->add_option("--tls-cert", flags->tls.cert,
                      "PEM client certificate, for a coordinator that wants one (mutual TLS)")
      ->envname("RINGTRAIN_TLS_CERT");
  command->add_option("--tls-key", flags->tls.key, "PEM private key of --tls-cert")
      ->envname("RINGTRAIN_TLS_KEY");
  command->add_option("--token-file", flags->token_file,
                      "File holding the client token (else $RINGTRAIN_TOKEN)");
}

// Installs the credentials for every CoordinatorClient; false (after printing why) when a file
// cannot be used.
bool InstallCredentials(const CredentialFlags& flags) {
  std::string token;
  if (!flags.token_file.empty()) {
    absl::StatusOr<std::string> read = ringtrain::ReadSingleToken(flags.token_file, "--token-file");
    if (!read.ok()) {
      std::cerr << "ringctl: " << read.status().message() << std::endl;
      return false;
    }
    token = *std::move(read);
  } else if (const char* env = std::getenv("RINGTRAIN_TOKEN"); env != nullptr && *env != '\0') {
    token = env;
  }
  absl::StatusOr<ringtrain::ChannelSecurity> security =
      ringtrain::LoadChannelSecurity(flags.tls, std::move(token));
  if (!security.ok()) {
    std::cerr << "ringctl: " << security.status().message() << std::endl;
    return false;
  }
  ringtrain::SetProcessChannelSecurity(*std::move(security));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringctl: the ringtrain client", "ringctl"};
  app.require_subcommand(1);

  // Shown in `ringctl --help`; PlaceCoordinatorFlag moves it after the subcommand before parsing.
  std::string coordinator;
  app.add_option("--coordinator", coordinator,
                 "The coordinator's address for any subcommand, given before or after it; default "
                 "$RINGTRAIN_COORDINATOR, else 127.0.0.1:50051");
  app.footer(
      "Examples:\n"
      "  ringctl up --workers 4\n"
      "  ringctl --coordinator 127.0.0.1:50051 submit configs/debug_model.toml --follow\n"
      "  ringctl SUBCOMMAND --help     (each shows an example)");

  ringtrain::LossCompareFlags loss_compare;
  ringtrain::ServiceFlags service;
  ringtrain::CompareFlags compare;
  compare.coordinator = ringtrain::kDefaultCoordinator;
  ringtrain::ExportFlags export_flags;
  export_flags.coordinator = ringtrain::kDefaultCoordinator;
  std::vector<Subcommand> subcommands = {
      {ringtrain::AddLossCompareCommand(app, &loss_compare),
       [&] { return ringtrain::RunLossCompare(loss_compare); }},
      {ringtrain::AddCompareCommand(app, &compare), [&] { return ringtrain::RunCompare(compare); }},
      {ringtrain::AddExportCommand(app, &export_flags),
       [&] { return ringtrain::RunExport(export_flags); }},
  };
  for (ringtrain::ServiceCommand& command : ringtrain::AddServiceCommands(app, &service)) {
    subcommands.push_back({command.app, std::move(command.run)});
  }
  ringtrain::LogsFlags logs;
  subcommands.push_back({ringtrain::AddLogsCommand(app, &logs), [&] { return ringtrain::RunLogs(logs); }});
  ringtrain::TopFlags top;
  subcommands.push_back({ringtrain::AddTopCommand(app, &top), [&] { return ringtrain::RunTop(top); }});

  CredentialFlags credentials;
  for (const Subcommand& subcommand : subcommands) AddCredentialFlags(subcommand.app, &credentials);
  // `plan` contacts nothing, so it takes no credentials.
  ringtrain::PlanFlags plan;
  subcommands.push_back(
      {ringtrain::AddPlanCommand(app, &plan), [&] { return ringtrain::RunPlan(plan); }});

  // $RINGTRAIN_COORDINATOR is the default of every subcommand that talks to a running coordinator;
  // not of `up` (which starts one) nor `loss-compare` (where --coordinator chooses to run on the
  // cluster instead of locally: that takes the flag).
  const char* env = std::getenv(ringtrain::kCoordinatorEnv);
  std::vector<std::string> args = ringtrain::PlaceCoordinatorFlag(
      std::vector<std::string>(argv + 1, argv + argc), env == nullptr ? "" : env,
      [&app](const std::string& name) {
        for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
          if (sub->get_name() == name) {
            return name != "up" && name != "loss-compare" &&
                   sub->get_option_no_throw("--coordinator") != nullptr;
          }
        }
        return false;
      });
  args.insert(args.begin(), argv[0]);
  std::vector<char*> placed;
  for (std::string& arg : args) placed.push_back(arg.data());
  try {
    app.parse(static_cast<int>(placed.size()), placed.data());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error with a hint
    return code == 0 ? 0 : ringtrain::kExitUsage;
  }
  if (!InstallCredentials(credentials)) return ringtrain::kExitUsage;
  for (const Subcommand& subcommand : subcommands) {
    if (subcommand.app->parsed()) return subcommand.run();
  }
  return ringtrain::kExitUsage;
}
