// ringtrain-run --nproc N [launcher flags] CONFIG.toml [--section.key=value ...]
// Starts N trainer ranks on this machine (see launcher.h and `ringtrain-run --help`).
// Exit status: 0 every rank succeeded, 1 a rank failed, 2 bad command line, 128 + signal when
// stopped by SIGINT or SIGTERM.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "worker/launcher/launcher.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<ringtrain::LaunchOptions> options = ringtrain::ParseLaunchArgs(args);
  if (!options.ok()) {
    std::fprintf(stderr, "ringtrain-run: %s\n%s", std::string(options.status().message()).c_str(),
                 ringtrain::kLaunchUsage);
    return 2;
  }
  if (options->help) {
    std::fputs(ringtrain::kLaunchUsage, stdout);
    return 0;
  }
  return ringtrain::Launcher(*std::move(options)).Run();
}
