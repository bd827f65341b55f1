// ringtrain-run's command line: what a launch is asked to do, parsed and checked before anything
// runs. Pure: no process, no socket.
#ifndef RINGTRAIN_WORKER_LAUNCHER_LAUNCH_ARGS_H_
#define RINGTRAIN_WORKER_LAUNCHER_LAUNCH_ARGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringtrain {

struct LaunchOptions {
  bool help = false;     // --help: print the usage and exit 0; nothing else is filled in
  bool version = false;  // --version: print the version and exit 0; likewise
  int nproc = 0;         // ranks to start, >= 1
  std::string master_addr = "127.0.0.1";
  int master_port = 0;       // 0: pick a free TCP port on master_addr
  int threads_per_rank = 1;  // OMP_NUM_THREADS and MKL_NUM_THREADS of every rank
  std::string trainer;       // empty: ringtrain-trainer beside the launcher's own executable
  double grace_seconds = 5;  // between SIGTERM and SIGKILL when stopping ranks
  std::string config;        // CONFIG.toml, passed to every rank first
  std::vector<std::string> trainer_args;  // everything after CONFIG, passed on verbatim
};

// The most ranks one launcher starts: two pipes each must fit the default limit of 1024 open files.
inline constexpr int kMaxLaunchRanks = 256;

// Parses the arguments after the program name. Launcher flags (`--flag value` or `--flag=value`)
// come before CONFIG; everything after CONFIG belongs to the trainer. Errors are INVALID_ARGUMENT
// and name the flag, the value and what would be accepted.
absl::StatusOr<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_LAUNCHER_LAUNCH_ARGS_H_
