// ringtrain-run --nproc N [launcher flags] CONFIG.toml [--section.key=value ...]
// Starts N trainer ranks on this machine (see launcher.h and `ringtrain-run --help`).
// Exit status: 0 every rank succeeded, 1 a rank failed, 2 bad command line, 128 + signal when
// stopped by SIGINT or SIGTERM.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/version/version.h"
#include "worker/launcher/launcher.h"

namespace {

constexpr char kUsage[] =
    "usage: ringtrain-run --nproc N [--master-addr ADDR] [--master-port PORT]\n"
    "                     [--threads-per-rank T] [--trainer PATH] [--grace-seconds S]\n"
    "                     CONFIG.toml [--section.key=value ...]\n"
    "  Starts N trainer ranks on this machine, each with RANK, LOCAL_RANK, WORLD_SIZE,\n"
    "  MASTER_ADDR and MASTER_PORT set, and relays their output prefixed with \"[rank r] \".\n"
    "  Everything after CONFIG is passed to every rank unchanged. When a rank fails, or on\n"
    "  Ctrl-C, the other ranks get SIGTERM and, after the grace period, SIGKILL.\n"
    "  --nproc N             ranks to start, 1..256 (required)\n"
    "  --master-addr ADDR    rendezvous address (default 127.0.0.1)\n"
    "  --master-port PORT    rendezvous port; 0 picks a free one (default 0)\n"
    "  --threads-per-rank T  OMP_NUM_THREADS and MKL_NUM_THREADS of every rank (default 1)\n"
    "  --trainer PATH        trainer executable (default: ringtrain-trainer beside ringtrain-run)\n"
    "  --grace-seconds S     wait between SIGTERM and SIGKILL (default 5)\n"
    "  --version             print the version and the commit it was built from\n"
    "  Exit status: 0 every rank succeeded, 1 a rank failed, 2 bad command line,\n"
    "  130/143 stopped by SIGINT/SIGTERM.\n";

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<ringtrain::LaunchOptions> options = ringtrain::ParseLaunchArgs(args);
  if (!options.ok()) {
    std::fprintf(stderr, "ringtrain-run: %s\n%s", std::string(options.status().message()).c_str(),
                 kUsage);
    return 2;
  }
  if (options->help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (options->version) {
    std::puts(ringtrain::VersionLine("ringtrain-run").c_str());
    return 0;
  }
  return ringtrain::Launcher(*std::move(options)).Run();
}
