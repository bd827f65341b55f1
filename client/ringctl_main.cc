// ringctl: the ringtrain command-line client. One subcommand per verb, one row each of the command
// table (client/command.h); the common flags are attached from each row's traits. Never links
// LibTorch.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client/command.h"
#include "client/coordinator_client.h"
#include "client/exit_codes.h"
#include "client/global_flags.h"
#include "common/version/version.h"

namespace {

// The row whose subcommand is called `name` (or has that alias); null when there is none.
const ringtrain::Command* FindCommand(const std::vector<ringtrain::Command>& commands,
                                      const std::vector<CLI::App*>& apps, const std::string& name) {
  for (size_t i = 0; i < commands.size(); ++i) {
    if (apps[i]->check_name(name)) return &commands[i];
  }
  return nullptr;
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
  app.set_version_flag("--version", ringtrain::VersionLine("ringctl"));
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

  const std::vector<ringtrain::Command> commands = ringtrain::Commands();
  std::vector<CLI::App*> apps;
  for (const ringtrain::Command& command : commands) {
    CLI::App* sub = command.add(app);
    if (sub->get_name() != command.name) {  // a row that does not say what its Add registers
      std::cerr << "ringctl: the row \"" << command.name << "\" adds \"" << sub->get_name() << "\""
                << std::endl;
      return ringtrain::kExitUsage;
    }
    ringtrain::AttachCommonFlags(sub, command.traits, command.common.get());
    apps.push_back(sub);
  }

  std::vector<std::string> args = ringtrain::PlaceGlobalFlags(
      std::vector<std::string>(argv + 1, argv + argc),
      [](const std::string& name) {
        const char* value = std::getenv(name.c_str());
        return std::string(value == nullptr ? "" : value);
      },
      [&](const std::string& name, const std::string& flag) {
        const ringtrain::Command* command = FindCommand(commands, apps, name);
        return command != nullptr && ringtrain::TakesEnv(command->traits, flag);
      });
  // CLI11 would say only "A subcommand is required"; PlaceGlobalFlags has moved the global flags
  // after the subcommand, so a first word that is not an option is the subcommand.
  if (!args.empty() && !args[0].empty() && args[0][0] != '-' &&
      FindCommand(commands, apps, args[0]) == nullptr) {
    std::cerr << "ringctl: " << ringtrain::UnknownCommandMessage(args[0], commands) << std::endl;
    return ringtrain::kExitUsage;
  }
  args.insert(args.begin(), argv[0]);
  std::vector<char*> placed;
  for (std::string& arg : args) placed.push_back(arg.data());
  try {
    app.parse(static_cast<int>(placed.size()), placed.data());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error with a hint
    return code == 0 ? 0 : ringtrain::kExitUsage;
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    if (!apps[i]->parsed()) continue;
    const ringtrain::Command& command = commands[i];
    if (!InstallCredentials(
            command.common->credentials,
            ringtrain::CalledCoordinator(*apps[i], command.traits, *command.common))) {
      return ringtrain::kExitUsage;
    }
    return command.run();
  }
  return ringtrain::kExitUsage;
}
