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
#include "client/global_flags.h"
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

// Registers the credential flags (the global flags a subcommand stores in CredentialFlags) on
// `command`. No envname: PlaceGlobalFlags applies the variables, so the flag always wins.
void AddCredentialFlags(CLI::App* command, ringtrain::CredentialFlags* flags) {
  for (const ringtrain::GlobalFlag& flag : ringtrain::kGlobalFlags) {
    if (flag.field != nullptr) command->add_option(flag.name, flags->*flag.field, flag.help);
  }
}

// The subcommand called `name` (or with that alias); null when there is none.
CLI::App* FindSubcommand(CLI::App& app, const std::string& name) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->check_name(name)) return sub;
  }
  return nullptr;
}

// Whether `sub` takes global `flag` from its variable: wherever it declares the flag, except
// --coordinator for `up` (which starts a coordinator) and `loss-compare` (where --coordinator
// chooses to run on the cluster instead of locally: that takes the flag).
bool TakesEnv(const CLI::App& sub, const std::string& flag) {
  if (sub.get_option_no_throw(flag) == nullptr) return false;
  return flag != "--coordinator" || (sub.get_name() != "up" && sub.get_name() != "loss-compare");
}

// The coordinator the parsed `sub` calls with the credentials; "" when it calls none (`up` calls
// only the one it starts, in plaintext without a token; `loss-compare` without --coordinator runs
// locally; `plan` contacts nothing).
std::string CalledCoordinator(const CLI::App& sub) {
  const CLI::Option* option = sub.get_option_no_throw("--coordinator");
  if (sub.get_name() == "up" || option == nullptr) return "";
  if (option->count() > 0) return option->as<std::string>();
  return TakesEnv(sub, "--coordinator") ? ringtrain::kDefaultCoordinator : "";
}

// Installs the credentials for every CoordinatorClient; false (after printing why) when a file
// cannot be used, or the token would travel in cleartext to `coordinator` on another machine.
// A token in cleartext to a loopback `coordinator` is warned of here, once.
bool InstallCredentials(const ringtrain::CredentialFlags& flags, const std::string& coordinator) {
  std::string token, source;
  if (!flags.token_file.empty()) {
    absl::StatusOr<std::string> read = ringtrain::ReadSingleToken(flags.token_file, "--token-file");
    if (!read.ok()) {
      std::cerr << "ringctl: " << read.status().message() << std::endl;
      return false;
    }
    token = *std::move(read);
    source = "--token-file " + flags.token_file;
  } else if (const char* env = std::getenv(ringtrain::kTokenEnv); env != nullptr && *env != '\0') {
    token = env;
    source = std::string("$") + ringtrain::kTokenEnv;
  }
  absl::StatusOr<ringtrain::ChannelSecurity> security = ringtrain::LoadChannelSecurity(
      {flags.tls_ca, flags.tls_cert, flags.tls_key}, std::move(token));
  absl::Status status = security.status();
  if (status.ok() && !coordinator.empty()) {
    status = ringtrain::CheckTokenTransport(coordinator, *security, source);
  }
  if (!status.ok()) {
    std::cerr << "ringctl: " << status.message() << std::endl;
    return false;
  }
  if (!coordinator.empty()) {
    const std::string warning = ringtrain::CleartextTokenWarning(coordinator, *security, source);
    if (!warning.empty()) std::cerr << "ringctl: " << warning << std::endl;
  }
  ringtrain::SetProcessChannelSecurity(*std::move(security));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringctl: the ringtrain client", "ringctl"};
  app.require_subcommand(1);

  // Shown in `ringctl --help`; PlaceGlobalFlags moves them after the subcommand before parsing.
  for (const ringtrain::GlobalFlag& flag : ringtrain::kGlobalFlags) {
    app.add_option(flag.name, flag.help);
  }
  app.footer(
      "Examples:\n"
      "  ringctl up --workers 4\n"
      "  ringctl --coordinator 127.0.0.1:50051 submit configs/debug_model.toml --follow\n"
      "  ringctl SUBCOMMAND --help     (each shows an example)\n"
      "The options above go before or after the subcommand, and each beats its variable.\n"
      "A token is sent only over TLS (--tls-ca) or to a loopback address (127.0.0.0/8, [::1],\n"
      "localhost), with a warning there.");

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

  ringtrain::CredentialFlags credentials;
  for (const Subcommand& subcommand : subcommands) AddCredentialFlags(subcommand.app, &credentials);
  // `plan` contacts nothing, so it takes no credentials.
  ringtrain::PlanFlags plan;
  subcommands.push_back(
      {ringtrain::AddPlanCommand(app, &plan), [&] { return ringtrain::RunPlan(plan); }});

  // A global flag given both before the subcommand and after it: the one after wins.
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    for (const ringtrain::GlobalFlag& flag : ringtrain::kGlobalFlags) {
      if (CLI::Option* option = sub->get_option_no_throw(flag.name)) option->take_last();
    }
  }
  std::vector<std::string> args = ringtrain::PlaceGlobalFlags(
      std::vector<std::string>(argv + 1, argv + argc),
      [](const std::string& name) {
        const char* value = std::getenv(name.c_str());
        return std::string(value == nullptr ? "" : value);
      },
      [&app](const std::string& name, const std::string& flag) {
        const CLI::App* sub = FindSubcommand(app, name);
        return sub != nullptr && TakesEnv(*sub, flag);
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
  for (const Subcommand& subcommand : subcommands) {
    if (!subcommand.app->parsed()) continue;
    if (!InstallCredentials(credentials, CalledCoordinator(*subcommand.app))) {
      return ringtrain::kExitUsage;
    }
    return subcommand.run();
  }
  return ringtrain::kExitUsage;
}
