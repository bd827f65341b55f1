// Child processes, started and stopped the one way every ringtrain process does it (the launcher's
// ranks, the agent's trainer, `ringctl up`'s cluster, loss-compare's runs, the tests' binaries):
//   - in a process group of its own, whose id is the child's pid, so that a signal reaches the
//     child and everything it starts, and a terminal's Ctrl-C reaches only the parent;
//   - with a clean signal state: every disposition the default and an empty signal mask, whatever
//     the parent had (an ignored signal and the mask survive exec; a shell may have had the parent
//     ignore SIGINT, and the parent may block signals to take them synchronously);
//   - with stdin from /dev/null (a background process group reading the terminal would stop);
//   - stopped as a group: SIGTERM, a grace period, SIGKILL.
// No LibTorch, no gRPC: POSIX and Abseil only.
#ifndef RINGTRAIN_COMMON_SUBPROCESS_H_
#define RINGTRAIN_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ringtrain {

// Where a child's stdout or stderr goes.
class Redirect {
 public:
  enum class Kind { kInherit, kFile, kFd, kStdout };

  // This process's own stream (the default).
  static Redirect Inherit() { return Redirect(Kind::kInherit, "", -1, false); }
  // A file, created with mode 0644 if missing, truncated unless `append`. It is opened by Start,
  // in the parent, so that a path that cannot be written is Start's error.
  static Redirect ToFile(std::string path, bool append = false) {
    return Redirect(Kind::kFile, std::move(path), -1, append);
  }
  // An open descriptor of the caller's (a pipe's write end, a log): the child gets a duplicate; the
  // descriptor stays the caller's, who closes it when it likes (a pipe's write end right after
  // Start, so that EOF comes when the child's side closes).
  static Redirect ToFd(int fd) { return Redirect(Kind::kFd, "", fd, false); }
  // For stderr only: the same open file as the child's stdout, whatever that is.
  static Redirect ToStdout() { return Redirect(Kind::kStdout, "", -1, false); }

  Kind kind() const { return kind_; }
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  bool append() const { return append_; }

 private:
  Redirect(Kind kind, std::string path, int fd, bool append)
      : kind_(kind), path_(std::move(path)), fd_(fd), append_(append) {}

  Kind kind_;
  std::string path_;
  int fd_;
  bool append_;
};

struct SpawnOptions {
  // argv[0] is the program's path (no PATH search); required.
  std::vector<std::string> argv;
  // "NAME=value" entries set on top of this process's environment, each replacing an inherited
  // NAME; the child gets the inherited entries first (in order), then these.
  std::vector<std::string> env;
  Redirect stdout_to = Redirect::Inherit();
  Redirect stderr_to = Redirect::Inherit();
  // When non-zero, the kernel sends it to the child should the thread that called Start die first
  // (PR_SET_PDEATHSIG), so that a parent killed by SIGKILL does not leave its children running.
  // Start from a thread that lives as long as the child (usually the main thread). A child whose
  // parent is already gone by the time it is set up exits with 128 + this signal.
  int parent_death_signal = 0;
  // When true, whatever is left in the child's process group (children it left behind) gets
  // SIGKILL as soon as the child is reaped, before its group id can be reused.
  bool kill_group_on_exit = false;
  // A program that cannot be executed (missing, not executable) is not Start's error: as a shell
  // does, the child writes `exec_error_prefix` + the reason + "\n" to its stderr and exits 127, so
  // that the failure goes where the program's own errors would. Empty:
  // "cannot execute '<argv[0]>': ".
  std::string exec_error_prefix;
};

// The exit code of a waitpid status, as a shell reports it: the exit status, or 128 + the signal
// that killed the process.
int ExitCode(int wait_status);

// One child process. Not thread-safe: callers that share one serialise its calls (RankSupervisor
// holds its mutex). Movable, not copyable.
//
// Only this object reaps its child, so its pid (and group id) cannot be reused behind its back
// while it is running; once it is reaped, no signal is sent any more. A process that sets SIGCHLD
// to SIG_IGN has its children reaped by the kernel: the child then counts as ended with its exit
// status unknown.
class Subprocess {
 public:
  // Forks and execs `options.argv` as described above. Errors (nothing is started then):
  // INVALID_ARGUMENT for an empty argv; FAILED_PRECONDITION naming the path when a ToFile path
  // cannot be opened; INTERNAL when /dev/null cannot be opened; RESOURCE_EXHAUSTED when fork fails.
  // Safe in a multi-threaded process: the child makes only async-signal-safe calls before exec.
  static absl::StatusOr<Subprocess> Start(const SpawnOptions& options);

  Subprocess() = default;  // holds no child: Poll and Wait return nullopt, Signal false
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // A child still running gets SIGKILL (to its group) and is reaped: nothing outlives its owner
  // by accident. Callers that want a gentler end call Stop first.
  ~Subprocess();

  pid_t pid() const { return pid_; }                     // also its process-group id; -1 when none
  bool running() const { return pid_ > 0 && !reaped_; }  // started and not reaped yet

  // Reaps the child if it has ended; never blocks. Returns its exit code (ExitCode; -1 when the
  // status is unknown) once it has ended, now or earlier, else nullopt.
  std::optional<int> Poll();
  // Waits for the child to end, at most `timeout` when one is given (polling every few ms). The
  // exit code as Poll gives it, or nullopt when the timeout passed first (the child runs on).
  std::optional<int> Wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // Sends `signo` to the child's process group (to the child alone if the group cannot be
  // signalled). False, sending nothing, once the child has been reaped or when there is none.
  bool Signal(int signo);

  // Stops the whole group: SIGTERM to it, up to `grace` for the child to end, then SIGKILL to it;
  // reaps the child, then sends SIGKILL to whatever is left of its group (a grandchild that
  // ignored SIGTERM). Returns the exit code; at once if the child had already been reaped.
  // Blocks up to `grace` plus the time SIGKILL takes.
  int Stop(std::chrono::milliseconds grace);

  // Once reaped: its exit code (-1 when unknown), and the raw waitpid status (nullopt when
  // unknown). nullopt both while it runs.
  std::optional<int> exit_code() const {
    return reaped_ ? std::optional<int>(exit_code_) : std::nullopt;
  }
  std::optional<int> wait_status() const { return wait_status_; }

 private:
  explicit Subprocess(pid_t pid, bool kill_group_on_exit)
      : pid_(pid), kill_group_on_exit_(kill_group_on_exit) {}

  // Records how the child ended; `status` is nullopt when someone else reaped it.
  void Reaped(std::optional<int> status);

  pid_t pid_ = -1;
  bool kill_group_on_exit_ = false;
  bool reaped_ = false;
  int exit_code_ = -1;
  std::optional<int> wait_status_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_SUBPROCESS_H_
