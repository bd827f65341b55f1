#include "client/command.h"

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/closest_match.h"

namespace ringtrain {

void AttachCommonFlags(CLI::App* command, unsigned traits, CommonFlags* common) {
  if (traits & kCallsCoordinator) {
    command
        ->add_option("--coordinator", common->coordinator,
                     "The coordinator's address (host:port); also before the subcommand, default "
                     "$RINGTRAIN_COORDINATOR")
        ->capture_default_str();
  }
  if (traits & kOutputFormat) {
    command->add_option("--output", common->output, "table (for people) or json (for scripts)")
        ->check(CLI::IsMember({"table", "json"}))
        ->capture_default_str();
  }
  if (traits & kCredentials) {
    for (const GlobalFlag& flag : kGlobalFlags) {
      if (flag.field != nullptr) {
        command->add_option(flag.name, common->credentials.*flag.field, flag.help);
      }
    }
  }
  // A global flag given both before the subcommand and after it: the one after wins.
  for (const GlobalFlag& flag : kGlobalFlags) {
    if (CLI::Option* option = command->get_option_no_throw(flag.name)) option->take_last();
  }
}

bool TakesEnv(unsigned traits, const std::string& flag) {
  if (flag == "--coordinator") return (traits & kCallsCoordinator) != 0;
  return (traits & kCredentials) != 0;
}

std::string CalledCoordinator(const CLI::App& command, unsigned traits, const CommonFlags& common) {
  if (traits & kCallsCoordinator) return common.coordinator;
  if (traits & kCoordinatorOptIn) {
    const CLI::Option* option = command.get_option_no_throw("--coordinator");
    if (option != nullptr && option->count() > 0) return option->as<std::string>();
  }
  return "";
}

std::string UnknownCommandMessage(const std::string& word, const std::vector<Command>& commands) {
  std::vector<std::string> names;
  for (const Command& command : commands) names.push_back(command.name);
  std::string message = absl::StrCat("unknown command \"", word, "\"");
  const std::string nearest = ClosestMatch(word, names);
  if (!nearest.empty()) absl::StrAppend(&message, "; did you mean \"", nearest, "\"?");
  absl::StrAppend(&message, "\nRun 'ringctl --help' for the list of commands.");
  return message;
}

}  // namespace ringtrain
