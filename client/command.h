// A ringctl subcommand as one row of the command table (client/commands.cc): its name, its traits
// (what it needs of the common flags) and its own two functions, `Add` (its options on CLI11) and
// `Run` (the exit status). The common flags — the coordinator's address, the credentials, the
// output format — are attached from the traits in one place (AttachCommonFlags), so a new
// subcommand is one file (XFlags, AddXCommand, RunX) and one row.
#ifndef RINGTRAIN_CLIENT_COMMAND_H_
#define RINGTRAIN_CLIENT_COMMAND_H_

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "client/global_flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

inline constexpr char kDefaultCoordinator[] = "127.0.0.1:50051";

// What a subcommand takes of the common flags. A bit set of these is a row's `traits`.
enum CommandTrait : unsigned {
  // --coordinator ADDR (default $RINGTRAIN_COORDINATOR, else kDefaultCoordinator): the coordinator
  // it calls, the one the credentials are checked against.
  kCallsCoordinator = 1u << 0,
  // Its own --coordinator ADDR, when given, is a coordinator it calls (loss-compare: run the sides
  // as jobs there); no default, no variable. The credentials are checked against it.
  kCoordinatorOptIn = 1u << 1,
  // --tls-ca, --tls-cert, --tls-key, --token-file (kGlobalFlags), each defaulting to its variable.
  kCredentials = 1u << 2,
  // --output table|json (default table).
  kOutputFormat = 1u << 3,
};

// What the common flags parse into. A command's flags derive from it to read them (`flags.output`);
// one that does not (its own --coordinator means something else) gets one of its own.
struct CommonFlags {
  std::string coordinator = kDefaultCoordinator;  // kCallsCoordinator
  std::string output = "table";                   // kOutputFormat: "table" | "json"
  CredentialFlags credentials;                    // kCredentials
};

struct Command {
  std::string name;
  unsigned traits = 0;
  std::function<CLI::App*(CLI::App& app)> add;  // adds the subcommand with its own options
  std::shared_ptr<CommonFlags> common;          // where its common flags parse into
  std::function<int()> run;                     // once parsed; returns the exit status
};

// A row of the table: `add(app, flags)` registers the subcommand called `name` and its own
// options; `run(flags)` runs it. The flags live as long as the Command.
template <class Flags>
Command MakeCommand(std::string name, unsigned traits, CLI::App* (*add)(CLI::App&, Flags*),
                    int (*run)(const Flags&)) {
  auto flags = std::make_shared<Flags>();
  std::shared_ptr<CommonFlags> common;
  if constexpr (std::is_base_of_v<CommonFlags, Flags>) {
    common = std::shared_ptr<CommonFlags>(flags, flags.get());
  } else {
    common = std::make_shared<CommonFlags>();
  }
  return {std::move(name), traits, [flags, add](CLI::App& app) { return add(app, flags.get()); },
          std::move(common), [flags, run] { return run(*flags); }};
}

// ringctl's subcommands, one row each, in `ringctl --help`'s order (client/commands.cc).
std::vector<Command> Commands();

// Adds to `command` the common flags its `traits` ask for, parsed into `*common` (which must
// outlive it). No envname: PlaceGlobalFlags applies the variables (TakesEnv), so the flag wins.
void AttachCommonFlags(CLI::App* command, unsigned traits, CommonFlags* common);

// Whether a command with `traits` takes global `flag` (kGlobalFlags' name) from its variable.
bool TakesEnv(unsigned traits, const std::string& flag);

// The coordinator the parsed `command` calls with the credentials; "" when it calls none (`up`
// calls only the one it starts, in plaintext without a token; `loss-compare` without
// --coordinator runs locally; `plan` contacts nothing).
std::string CalledCoordinator(const CLI::App& command, unsigned traits, const CommonFlags& common);

// What ringctl says of a first argument `word` that names none of `commands` (kubectl's way):
// 'unknown command "sumbit"', the nearest name when one is close ('did you mean "submit"?'), and
// where the list is.
std::string UnknownCommandMessage(const std::string& word, const std::vector<Command>& commands);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_COMMAND_H_
