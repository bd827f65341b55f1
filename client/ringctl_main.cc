// ringctl: the ringtrain command-line client. One subcommand per verb; each registers its flags on
// the shared CLI11 app and says how to run once parsed. Never links LibTorch.
#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

#include "client/exit_codes.h"
#include "client/loss_compare_command.h"
#include "client/service_commands.h"

namespace {

struct Subcommand {
  CLI::App* app;
  std::function<int()> run;  // returns the exit code
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringctl: the ringtrain client", "ringctl"};
  app.require_subcommand(1);

  ringtrain::LossCompareFlags loss_compare;
  ringtrain::ServiceFlags service;
  std::vector<Subcommand> subcommands = {
      {ringtrain::AddLossCompareCommand(app, &loss_compare),
       [&] { return ringtrain::RunLossCompare(loss_compare); }},
  };
  for (ringtrain::ServiceCommand& command : ringtrain::AddServiceCommands(app, &service)) {
    subcommands.push_back({command.app, std::move(command.run)});
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, or the error with a hint
    return code == 0 ? 0 : ringtrain::kExitUsage;
  }
  for (const Subcommand& subcommand : subcommands) {
    if (subcommand.app->parsed()) return subcommand.run();
  }
  return ringtrain::kExitUsage;
}
