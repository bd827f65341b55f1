// ringctl: the ringtrain command-line client. One subcommand per verb; each registers its flags on
// the shared CLI11 app and says how to run once parsed. Never links LibTorch.
#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

#include "client/loss_compare.h"

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
  const std::vector<Subcommand> subcommands = {
      {ringtrain::AddLossCompareCommand(app, &loss_compare),
       [&] { return ringtrain::RunLossCompare(loss_compare); }},
  };

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
