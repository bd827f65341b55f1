#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

extern char** environ;

namespace ringtrain {
namespace {

constexpr int kSameAsStdout = -2;  // a ChildPlan::stderr_fd: dup the child's stdout
constexpr size_t kMaxReasonBytes = 128;
constexpr std::chrono::milliseconds kMaxPollInterval{20};

// Descriptors Start opened for the child; the parent's copies close once fork has run.
class OpenedFds {
 public:
  OpenedFds() = default;
  OpenedFds(const OpenedFds&) = delete;
  OpenedFds& operator=(const OpenedFds&) = delete;
  ~OpenedFds() {
    for (int fd : fds_) close(fd);
  }
  int Keep(int fd) {
    fds_.push_back(fd);
    return fd;
  }

 private:
  std::vector<int> fds_;
};

// Everything the child needs, prepared before fork: after it, the child may not allocate.
struct ChildPlan {
  char* const* argv;
  char* const* envp;
  int stdin_fd;   // /dev/null
  int stdout_fd;  // -1: inherited
  int stderr_fd;  // -1: inherited; kSameAsStdout
  int death_signal;
  pid_t parent;
  char* message;  // exec_error_prefix, then room for the reason and '\n'
  size_t prefix_size;
  size_t message_capacity;
};

// This process's environment with each "NAME=value" of `overrides` replacing an inherited NAME.
std::vector<std::string> ChildEnvironment(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const absl::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& o : overrides) {
      replaced = replaced || absl::string_view(o).substr(0, o.find('=')) == name;
    }
    if (!replaced) env.emplace_back(entry);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The descriptor a Redirect gives the child (-1: inherited), opening a file if it names one.
absl::StatusOr<int> Resolve(const Redirect& to, bool is_stderr, OpenedFds& opened) {
  switch (to.kind()) {
    case Redirect::Kind::kInherit: return -1;
    case Redirect::Kind::kFd:
      if (to.fd() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("Redirect::ToFd(", to.fd(), "): not a descriptor"));
      }
      return to.fd();
    case Redirect::Kind::kStdout:
      if (!is_stderr) return absl::InvalidArgumentError("Redirect::ToStdout() is for stderr only");
      return kSameAsStdout;
    case Redirect::Kind::kFile: {
      const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (to.append() ? O_APPEND : O_TRUNC);
      const int fd = open(to.path().c_str(), flags, 0644);
      if (fd < 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot write ", to.path(), ": ", std::strerror(errno)));
      }
      return opened.Keep(fd);
    }
  }
  return absl::InternalError("unknown Redirect kind");
}

// In the forked child: only async-signal-safe calls until exec, since the parent may have other
// threads (one of which may have held the malloc lock at fork time).
[[noreturn]] void RunChild(const ChildPlan& plan) {
  setpgid(0, 0);
  // The parent blocked every signal around fork, so none of its handlers can run here before the
  // defaults are back; a signal that arrived meanwhile is delivered with its default action.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int signo = 1; signo < NSIG; ++signo) {
    if (signo != SIGKILL && signo != SIGSTOP) sigaction(signo, &default_action, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (plan.death_signal != 0) {
    prctl(PR_SET_PDEATHSIG, plan.death_signal);
    // The parent died before prctl took effect: nobody would send the signal now.
    if (getppid() != plan.parent) _exit(128 + plan.death_signal);
  }
  // Move the sources out of 0..2 first, so that no dup2 below overwrites one still to be used.
  int source[3] = {plan.stdin_fd, plan.stdout_fd, plan.stderr_fd};
  for (int& fd : source) {
    if (fd >= 0 && fd <= STDERR_FILENO) fd = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  }
  for (int target = 0; target < 3; ++target) {
    if (source[target] >= 0) dup2(source[target], target);  // the duplicate keeps no FD_CLOEXEC
  }
  if (plan.stderr_fd == kSameAsStdout) dup2(STDOUT_FILENO, STDERR_FILENO);
  execve(plan.argv[0], plan.argv, plan.envp);
  // strerrordesc_np reads a constant table (no locale, no allocation), unlike strerror.
  const char* reason = strerrordesc_np(errno);
  if (reason == nullptr) reason = "unknown error";
  size_t size = plan.prefix_size;
  while (*reason != '\0' && size + 1 < plan.message_capacity) plan.message[size++] = *reason++;
  plan.message[size++] = '\n';
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, plan.message, size);
  _exit(127);
}

}  // namespace

int ExitCode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

absl::StatusOr<Subprocess> Subprocess::Start(const SpawnOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return absl::InvalidArgumentError("no program to start: argv is empty");
  }
  OpenedFds opened;
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    return absl::InternalError(absl::StrCat("cannot open /dev/null: ", std::strerror(errno)));
  }
  opened.Keep(null_fd);
  absl::StatusOr<int> stdout_fd = Resolve(options.stdout_to, /*is_stderr=*/false, opened);
  if (!stdout_fd.ok()) return stdout_fd.status();
  absl::StatusOr<int> stderr_fd = Resolve(options.stderr_to, /*is_stderr=*/true, opened);
  if (!stderr_fd.ok()) return stderr_fd.status();

  std::vector<std::string> args = options.argv;
  std::vector<std::string> env = ChildEnvironment(options.env);
  const std::vector<char*> argv = CStrings(args), envp = CStrings(env);
  std::string message = options.exec_error_prefix.empty()
                            ? absl::StrCat("cannot execute '", options.argv[0], "': ")
                            : options.exec_error_prefix;
  const size_t prefix_size = message.size();
  message.resize(prefix_size + kMaxReasonBytes);
  ChildPlan plan;
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.stdin_fd = null_fd;
  plan.stdout_fd = *stdout_fd;
  plan.stderr_fd = *stderr_fd;
  plan.death_signal = options.parent_death_signal;
  plan.parent = getpid();
  plan.message = message.data();
  plan.prefix_size = prefix_size;
  plan.message_capacity = message.size();

  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  const pid_t pid = fork();
  if (pid == 0) RunChild(plan);
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", std::strerror(fork_errno)));
  }
  // The child does it too; whichever runs first wins, so a signal sent right away finds the group.
  setpgid(pid, pid);
  return Subprocess(pid, options.kill_group_on_exit);
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      kill_group_on_exit_(other.kill_group_on_exit_),
      reaped_(other.reaped_),
      exit_code_(other.exit_code_),
      wait_status_(other.wait_status_) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (running()) {
      Signal(SIGKILL);
      Wait();
    }
    pid_ = std::exchange(other.pid_, -1);
    kill_group_on_exit_ = other.kill_group_on_exit_;
    reaped_ = other.reaped_;
    exit_code_ = other.exit_code_;
    wait_status_ = other.wait_status_;
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (running()) {
    Signal(SIGKILL);
    Wait();
  }
}

void Subprocess::Reaped(std::optional<int> status) {
  reaped_ = true;
  wait_status_ = status;
  exit_code_ = status ? ExitCode(*status) : -1;
  // Right after the reap: while members remain, the group id cannot be reused.
  if (kill_group_on_exit_) kill(-pid_, SIGKILL);
}

std::optional<int> Subprocess::Poll() {
  if (pid_ <= 0) return std::nullopt;
  if (reaped_) return exit_code_;
  int status = 0;
  pid_t done;
  while ((done = waitpid(pid_, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (done == 0) return std::nullopt;
  Reaped(done == pid_ ? std::optional<int>(status) : std::nullopt);  // else ECHILD
  return exit_code_;
}

std::optional<int> Subprocess::Wait(std::optional<std::chrono::milliseconds> timeout) {
  if (pid_ <= 0) return std::nullopt;
  if (reaped_) return exit_code_;
  if (!timeout) {
    int status = 0;
    pid_t done;
    while ((done = waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    Reaped(done == pid_ ? std::optional<int>(status) : std::nullopt);
    return exit_code_;
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + *timeout;
  // Short sleeps first: most children asked to end are gone within a few milliseconds.
  std::chrono::milliseconds interval{1};
  for (;;) {
    if (std::optional<int> code = Poll()) return code;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::min<Clock::duration>(interval, deadline - now));
    interval = std::min(interval * 2, kMaxPollInterval);
  }
}

bool Subprocess::Signal(int signo) {
  if (!running()) return false;
  return kill(-pid_, signo) == 0 || kill(pid_, signo) == 0;
}

int Subprocess::Stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return -1;
  if (!reaped_) {
    kill_group_on_exit_ = true;  // the reap below takes the rest of the group with it
    Signal(SIGTERM);
    if (!Wait(grace)) {
      Signal(SIGKILL);
      Wait();
    }
  }
  return exit_code_;
}

}  // namespace ringtrain
