#include "client/loss_compare_local.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/executable_path.h"
#include "common/subprocess.h"

namespace ringtrain {
namespace fs = std::filesystem;
namespace {

std::string ShellQuote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_-+=./:,@%") == std::string::npos) {
    return arg;
  }
  std::string quoted = "'";
  for (char ch : arg) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs side->argv with stdout and stderr into side->log_path; on a terminal, shows the last step in
// the JSONL at most once a second. Sets exit_code (128 + signal when killed) and seconds; returns
// the last few KB of output for error messages. An error only when the run could not be started.
absl::StatusOr<std::string> RunLogged(LossCompareSide* side, int steps) {
  std::ofstream log(side->log_path, std::ios::binary | std::ios::trunc);
  if (!log) return absl::FailedPreconditionError("cannot write " + side->log_path);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));
  const auto start = std::chrono::steady_clock::now();
  SpawnOptions spawn;
  spawn.argv = side->argv;
  spawn.stdout_to = Redirect::ToFd(fds[1]);
  spawn.stderr_to = Redirect::ToStdout();
  // The run has a process group of its own, so a Ctrl-C reaches ringctl alone: the run stops by
  // this SIGTERM when ringctl dies (the launcher then stops its ranks).
  spawn.parent_death_signal = SIGTERM;
  spawn.exec_error_prefix = absl::StrCat("ringctl: cannot execute ", side->argv.at(0), ": ");
  absl::StatusOr<Subprocess> run = Subprocess::Start(spawn);
  close(fds[1]);  // EOF comes once the run's copies close
  if (!run.ok()) {
    close(fds[0]);
    return run.status();
  }
  const bool tty = isatty(STDOUT_FILENO);
  std::string tail;
  double last_shown = 0;
  char buffer[65536];
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, 250);
    if (ready > 0) {
      const ssize_t n = read(fds[0], buffer, sizeof(buffer));
      if (n == 0) break;
      if (n < 0 && errno != EINTR) break;
      if (n > 0) {
        log.write(buffer, n).flush();
        tail.append(buffer, n);
        if (tail.size() > 8192) tail.erase(0, tail.size() - 4096);
      }
    }
    if (tty && SecondsSince(start) - last_shown >= 1.0) {
      last_shown = SecondsSince(start);
      std::printf("\r  %s: step %d/%d, %.0f s  ", side->name.c_str(),
                  LastStepInFile(side->jsonl_path), steps, last_shown);
      std::fflush(stdout);
    }
  }
  close(fds[0]);
  side->exit_code = run->Wait().value_or(-1);
  side->seconds = SecondsSince(start);
  if (tty) std::printf("\r%60s\r", "");
  return tail;
}

// The last `lines` lines of `text`, each indented.
std::string LastLines(const std::string& text, int lines) {
  std::vector<absl::string_view> all = absl::StrSplit(text, '\n', absl::SkipEmpty());
  const size_t first = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  std::string out;
  for (size_t i = first; i < all.size(); ++i) absl::StrAppend(&out, "    ", all[i], "\n");
  return out;
}

}  // namespace

std::string DefaultRunPath() {
  const std::string beside = BesideThisExecutable("ringtrain-run");
  return beside.empty() ? "ringtrain-run" : beside;
}

absl::StatusOr<StepLosses> RunSideLocally(LossCompareSide* side, int steps) {
  std::cout << side->name << ": "
            << absl::StrJoin(side->argv, " ",
                             [](std::string* out, const std::string& a) { *out += ShellQuote(a); })
            << "\n  (log: " << side->log_path << ")" << std::endl;
  std::error_code ignored;
  fs::remove(side->jsonl_path, ignored);  // never read a stale file from an earlier comparison
  absl::StatusOr<std::string> tail = RunLogged(side, steps);
  if (!tail.ok()) {
    return absl::Status(
        tail.status().code(),
        absl::StrCat(side->name, " run could not start: ", tail.status().message()));
  }
  if (side->exit_code != 0) {
    std::cerr << side->name << " run output ends with:\n" << LastLines(*tail, 20);
    return absl::AbortedError(absl::StrCat(side->name, " run failed (exit ", side->exit_code,
                                           " after ", absl::StrFormat("%.1f", side->seconds),
                                           " s); see ", side->log_path));
  }
  std::cout << absl::StrFormat("  %s: finished in %.1f s", side->name, side->seconds) << std::endl;
  return ReadSideLosses(*side, steps);
}

}  // namespace ringtrain
