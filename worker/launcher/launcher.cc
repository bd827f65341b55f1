#include "worker/launcher/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/executable_path.h"

extern char** environ;

namespace ringtrain {

namespace {

constexpr int kMaxRanks = 256;  // two pipes each must fit the default limit of 1024 open files
constexpr size_t kMaxLineBytes = 64 << 10;  // a longer line without '\n' is cut here
constexpr const char* kFlags[] = {"--nproc",   "--master-addr",      "--master-port",
                                  "--trainer", "--threads-per-rank", "--grace-seconds"};
// Variables the launcher sets for every rank, replacing inherited ones.
constexpr const char* kRankVariables[] = {"RANK",        "LOCAL_RANK",      "WORLD_SIZE",
                                          "MASTER_ADDR", "MASTER_PORT",     "OMP_NUM_THREADS",
                                          "MKL_NUM_THREADS"};

absl::Status ParseInt(const std::string& flag, const std::string& value, int lo, int hi,
                      int* out) {
  if (!absl::SimpleAtoi(value, out) || *out < lo || *out > hi) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", value,
                                                   "' is not valid; expected a whole number in ",
                                                   lo, "..", hi));
  }
  return absl::OkStatus();
}

// The signal handler's only job: wake the poll loop. Run() owns the pipe.
int g_signal_write_fd = -1;

extern "C" void ForwardSignalToPipe(int signo) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  [[maybe_unused]] const ssize_t n = write(g_signal_write_fd, &byte, 1);
  errno = saved_errno;
}

// Routes SIGINT, SIGTERM and SIGCHLD into a pipe and ignores SIGPIPE for its lifetime.
class SignalRouting {
 public:
  explicit SignalRouting(int write_fd) {
    g_signal_write_fd = write_fd;
    struct sigaction action {};
    action.sa_handler = ForwardSignalToPipe;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (size_t i = 0; i < 3; ++i) sigaction(kRouted[i], &action, &saved_[i]);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &saved_[3]);
  }
  ~SignalRouting() {
    for (size_t i = 0; i < 4; ++i) sigaction(kRouted[i], &saved_[i], nullptr);
    g_signal_write_fd = -1;
  }

 private:
  static constexpr int kRouted[4] = {SIGINT, SIGTERM, SIGCHLD, SIGPIPE};
  struct sigaction saved_[4];
};

std::string SignalName(int signo) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"},
      {SIGSEGV, "SIGSEGV"}, {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},
      {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}, {SIGXCPU, "SIGXCPU"}};
  for (const auto& [number, name] : kNames) {
    if (number == signo) return name;
  }
  return absl::StrCat("signal ", signo);
}

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // e.g. EPIPE: nobody reads our output any more; keep supervising
    done += static_cast<size_t>(n);
  }
}

absl::StatusOr<std::string> DefaultTrainerPath() {
  std::string path = BesideThisExecutable("ringtrain-trainer");
  if (path.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot read /proc/self/exe to find ringtrain-trainer (", std::strerror(errno),
        "); pass --trainer PATH"));
  }
  return path;
}

// The inherited environment with the rendezvous variables of `rank` set.
std::vector<std::string> RankEnvironment(int rank, const LaunchOptions& o, int port) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const char* v : kRankVariables) replaced = replaced || name == v;
    if (!replaced) env.push_back(entry);
  }
  const std::string threads = std::to_string(o.threads_per_rank);
  for (const std::string& v :
       {"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(rank),
        "WORLD_SIZE=" + std::to_string(o.nproc), "MASTER_ADDR=" + o.master_addr,
        "MASTER_PORT=" + std::to_string(port), "OMP_NUM_THREADS=" + threads,
        "MKL_NUM_THREADS=" + threads}) {
    env.push_back(v);
  }
  return env;
}

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void MoveFd(int from, int to) {
  if (from == to) {
    fcntl(to, F_SETFD, 0);  // keep it across exec
  } else {
    dup2(from, to);
  }
}

// In the forked child: its own process group, default signal handling, the pipes as stdout and
// stderr, /dev/null as stdin (a background process group reading the terminal would stop), then
// exec. Between fork and exec only async-signal-safe calls (the launcher is single-threaded, so
// strerror is safe too).
[[noreturn]] void ExecRank(char* const* argv, char* const* envp, int out_fd, int err_fd,
                           pid_t launcher, const std::string& exec_error) {
  // Signals are blocked (see Spawn) until the launcher's handlers, which write to the launcher's
  // signal pipe, are replaced by the defaults.
  setpgid(0, 0);
  for (int signo : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE}) signal(signo, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // A launcher killed by SIGKILL cannot stop its ranks; the kernel does it instead.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != launcher) _exit(128 + SIGTERM);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) MoveFd(null_fd, STDIN_FILENO);
  MoveFd(out_fd, STDOUT_FILENO);
  MoveFd(err_fd, STDERR_FILENO);
  execve(argv[0], argv, envp);
  const std::string message = exec_error + std::strerror(errno) + "\n";
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, message.data(), message.size());
  _exit(127);
}

}  // namespace

absl::StatusOr<LaunchOptions> ParseLaunchArgs(const std::vector<std::string>& args) {
  LaunchOptions o;
  bool have_nproc = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // CONFIG
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    bool known = false;
    for (const char* f : kFlags) known = known || flag == f;
    if (!known) {
      const bool looks_like_override = flag.find('.') != std::string::npos;
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag '", flag, "'",
          looks_like_override ? "; config overrides go after CONFIG.toml"
                              : "; launcher flags are --nproc, --master-addr, --master-port, "
                                "--threads-per-rank, --trainer, --grace-seconds"));
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    }
    if (flag == "--nproc") {
      if (absl::Status s = ParseInt(flag, value, 1, kMaxRanks, &o.nproc); !s.ok()) return s;
      have_nproc = true;
    } else if (flag == "--master-port") {
      if (absl::Status s = ParseInt(flag, value, 0, 65535, &o.master_port); !s.ok()) return s;
    } else if (flag == "--threads-per-rank") {
      if (absl::Status s = ParseInt(flag, value, 1, 1024, &o.threads_per_rank); !s.ok()) return s;
    } else if (flag == "--grace-seconds") {
      if (!absl::SimpleAtod(value, &o.grace_seconds) || !std::isfinite(o.grace_seconds) ||
          o.grace_seconds < 0 || o.grace_seconds > 3600) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--grace-seconds: '", value, "' is not valid; expected seconds in 0..3600"));
      }
    } else if (value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs a non-empty value"));
    } else if (flag == "--master-addr") {
      o.master_addr = value;
    } else {
      o.trainer = value;
    }
  }
  if (i == args.size()) {
    return absl::InvalidArgumentError("missing CONFIG.toml (the trainer's job config)");
  }
  if (!have_nproc) {
    return absl::InvalidArgumentError("--nproc is required: how many ranks to start (1..256)");
  }
  o.config = args[i];
  o.trainer_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  return o;
}

absl::StatusOr<int> PickFreePort(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(addr.c_str(), "0", &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--master-addr '", addr, "' does not resolve: ", gai_strerror(rc)));
  }
  std::string error = "no address";
  int port = -1;
  for (addrinfo* a = found; a != nullptr && port < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
      port = bound.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                 : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      error = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (port < 0) {
    return absl::UnavailableError(absl::StrCat("cannot bind a TCP port on --master-addr '", addr,
                                               "': ", error,
                                               "; use an address of this machine"));
  }
  return port;
}

Launcher::Launcher(LaunchOptions options) : options_(std::move(options)) {}

Launcher::~Launcher() {
  for (int fd : signal_pipe_) {
    if (fd >= 0) close(fd);
  }
}

int Launcher::Run() {
  const Clock::time_point start = Clock::now();
  std::string trainer = options_.trainer;
  if (trainer.empty()) {
    absl::StatusOr<std::string> path = DefaultTrainerPath();
    if (!path.ok()) {
      Say(std::string(path.status().message()));
      return 1;
    }
    trainer = *std::move(path);
  }
  int port = options_.master_port;
  if (port == 0) {
    absl::StatusOr<int> picked = PickFreePort(options_.master_addr);
    if (!picked.ok()) {
      Say(std::string(picked.status().message()));
      return 1;
    }
    port = *picked;
  }
  if (pipe2(signal_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    Say(absl::StrCat("cannot create a pipe: ", std::strerror(errno)));
    return 1;
  }
  SignalRouting routing(signal_pipe_[1]);
  Say(absl::StrCat("starting ", options_.nproc, options_.nproc == 1 ? " rank of " : " ranks of ",
                   trainer, " (MASTER_ADDR=", options_.master_addr, " MASTER_PORT=", port, ")"));
  for (int r = 0; r < options_.nproc; ++r) {
    const absl::Status started = Spawn(r, trainer, RankEnvironment(r, options_, port));
    if (!started.ok()) {
      StopRanks(absl::StrCat("cannot start rank ", r, ": ", started.message(),
                             r > 0 ? "; stopping the other ranks" : ""),
                1);
      break;
    }
  }
  Supervise();
  // Every rank is gone; a descendant may still hold a pipe open, so take what is there and close.
  for (size_t r = 0; r < ranks_.size(); ++r) {
    for (Stream* s : {&ranks_[r].out, &ranks_[r].err}) {
      if (Pump(static_cast<int>(r), *s, /*drain=*/true)) CloseStream(static_cast<int>(r), *s);
    }
  }
  if (exit_code_ == 0) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    Say(absl::StrFormat("all %d ranks finished in %.1f s", options_.nproc, seconds));
  }
  return exit_code_;
}

absl::Status Launcher::Spawn(int rank, const std::string& trainer,
                             const std::vector<std::string>& env) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    const int saved = errno;
    close(out[0]);
    close(out[1]);
    return absl::InternalError(std::strerror(saved));
  }
  std::vector<std::string> args = {trainer, options_.config};
  args.insert(args.end(), options_.trainer_args.begin(), options_.trainer_args.end());
  const std::vector<char*> argv = CStrings(args), envp = CStrings(env);
  const std::string exec_error =
      absl::StrCat("ringtrain-run: cannot execute trainer '", trainer, "': ");
  const pid_t launcher = getpid();
  sigset_t all, saved;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &saved);
  const pid_t pid = fork();
  if (pid == 0) ExecRank(argv.data(), envp.data(), out[1], err[1], launcher, exec_error);
  const int fork_errno = errno;
  sigprocmask(SIG_SETMASK, &saved, nullptr);
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    return absl::ResourceExhaustedError(absl::StrCat("fork: ", std::strerror(fork_errno)));
  }
  setpgid(pid, pid);  // the child does it too; whichever runs first wins, before any kill(-pid)
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  Rank& r = ranks_.emplace_back();
  r.pid = pid;
  r.out = Stream{out[0], STDOUT_FILENO, {}};
  r.err = Stream{err[0], STDERR_FILENO, {}};
  return absl::OkStatus();
}

void Launcher::Supervise() {
  std::vector<pollfd> fds;
  std::vector<std::pair<int, Stream*>> owners;  // (rank, stream) of fds[i + 1]
  while (!AllReaped()) {
    fds.assign(1, pollfd{signal_pipe_[0], POLLIN, 0});
    owners.clear();
    for (size_t r = 0; r < ranks_.size(); ++r) {
      for (Stream* s : {&ranks_[r].out, &ranks_[r].err}) {
        if (s->fd < 0) continue;
        fds.push_back(pollfd{s->fd, POLLIN, 0});
        owners.emplace_back(static_cast<int>(r), s);
      }
    }
    int timeout_ms = -1;
    if (stopping_ && !killed_) {
      const auto left = kill_deadline_ - Clock::now();
      timeout_ms = static_cast<int>(std::max<int64_t>(
          0, std::chrono::ceil<std::chrono::milliseconds>(left).count()));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      Say(absl::StrCat("poll: ", std::strerror(errno), "; killing all ranks"));
      exit_code_ = exit_code_ == 0 ? 1 : exit_code_;
      stopping_ = true;
      KillRemaining();
      for (Rank& r : ranks_) {
        if (!r.reaped) waitpid(r.pid, nullptr, 0);
        r.reaped = true;
      }
      return;
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) Pump(owners[i - 1].first, *owners[i - 1].second, false);
    }
    if (fds[0].revents != 0) {
      unsigned char signals[64];
      ssize_t n;
      bool child_exited = false;
      while ((n = read(signal_pipe_[0], signals, sizeof(signals))) > 0) {
        for (ssize_t k = 0; k < n; ++k) {
          if (signals[k] == SIGCHLD) {
            child_exited = true;
          } else {
            OnSignal(signals[k]);
          }
        }
      }
      if (child_exited) ReapExited();
    }
    if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) {
      std::vector<int> left;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        if (!ranks_[r].reaped) left.push_back(static_cast<int>(r));
      }
      Say(absl::StrFormat("rank%s %s still running %g s after SIGTERM; sending SIGKILL",
                          left.size() == 1 ? "" : "s", absl::StrJoin(left, ", "),
                          options_.grace_seconds));
      KillRemaining();
    }
  }
}

void Launcher::OnSignal(int signo) {
  if (!stopping_) {
    StopRanks(absl::StrCat("got ", SignalName(signo), "; stopping all ranks"), 128 + signo);
  } else if (!killed_) {
    Say(absl::StrCat("got ", SignalName(signo), " again; killing all ranks now"));
    KillRemaining();
  }
}

void Launcher::ReapExited() {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    if (rank.reaped) continue;
    int status = 0;
    pid_t done;
    while ((done = waitpid(rank.pid, &status, WNOHANG)) < 0 && errno == EINTR) {
    }
    if (done == 0) continue;
    rank.reaped = true;
    if (done < 0) continue;  // ECHILD: not ours to wait for any more
    // Its last lines (often the reason it failed) come before the launcher's verdict.
    Pump(static_cast<int>(r), rank.out, /*drain=*/true);
    Pump(static_cast<int>(r), rank.err, /*drain=*/true);
    if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || stopping_) continue;
    std::string message = absl::StrCat("rank ", r, " ");
    if (WIFEXITED(status)) {
      absl::StrAppend(&message, "exited with status ", WEXITSTATUS(status));
    } else {
      absl::StrAppend(&message, "was killed by signal ", SignalName(WTERMSIG(status)));
    }
    if (!AllReaped()) absl::StrAppend(&message, "; stopping the other ranks");
    StopRanks(message, 1);
  }
}

void Launcher::StopRanks(const std::string& why, int exit_code) {
  if (stopping_) return;
  Say(why);
  stopping_ = true;
  exit_code_ = exit_code;
  kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.grace_seconds));
  for (const Rank& r : ranks_) {
    // The whole process group, so that a rank's own children stop too.
    if (!r.reaped && kill(-r.pid, SIGTERM) != 0) kill(r.pid, SIGTERM);
  }
}

void Launcher::KillRemaining() {
  killed_ = true;
  for (const Rank& r : ranks_) {
    if (!r.reaped && kill(-r.pid, SIGKILL) != 0) kill(r.pid, SIGKILL);
  }
}

bool Launcher::Pump(int rank, Stream& s, bool drain) {
  char buffer[64 << 10];
  // One read per wake-up keeps a chatty rank from starving the others; a drain empties the pipe
  // (bounded, in case a descendant keeps writing).
  for (int reads = 0; s.fd >= 0 && reads < (drain ? 1024 : 1); ++reads) {
    const ssize_t n = read(s.fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {  // EOF, or an error that will not go away
      CloseStream(rank, s);
      break;
    }
    s.pending.append(buffer, static_cast<size_t>(n));
    size_t begin = 0, end;
    while ((end = s.pending.find('\n', begin)) != std::string::npos) {
      Emit(rank, s, s.pending.substr(begin, end - begin));
      begin = end + 1;
    }
    s.pending.erase(0, begin);
    while (s.pending.size() >= kMaxLineBytes) {
      Emit(rank, s, s.pending.substr(0, kMaxLineBytes));
      s.pending.erase(0, kMaxLineBytes);
    }
  }
  return s.fd >= 0;
}

void Launcher::CloseStream(int rank, Stream& s) {
  if (!s.pending.empty()) Emit(rank, s, s.pending);  // a last line without '\n'
  s.pending.clear();
  close(s.fd);
  s.fd = -1;
}

void Launcher::Emit(int rank, const Stream& s, const std::string& line) {
  WriteAll(s.out_fd, absl::StrCat("[rank ", rank, "] ", line, "\n"));
}

void Launcher::Say(const std::string& message) {
  WriteAll(STDERR_FILENO, absl::StrCat("ringtrain-run: ", message, "\n"));
}

bool Launcher::AllReaped() const {
  for (const Rank& r : ranks_) {
    if (!r.reaped) return false;
  }
  return true;
}

}  // namespace ringtrain
