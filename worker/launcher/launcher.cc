#include "worker/launcher/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/executable_path.h"
#include "worker/launcher/launch_port.h"

namespace ringtrain {

namespace {

constexpr size_t kMaxLineBytes = 64 << 10;  // a longer line without '\n' is cut here

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
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read /proc/self/exe to find ringtrain-trainer (", std::strerror(errno),
                     "); pass --trainer PATH"));
  }
  return path;
}

// The rendezvous variables of `rank`: they replace inherited ones of the same names.
std::vector<std::string> RankVariables(int rank, const LaunchOptions& o, int port) {
  const std::string threads = std::to_string(o.threads_per_rank);
  return {"RANK=" + std::to_string(rank),
          "LOCAL_RANK=" + std::to_string(rank),
          "WORLD_SIZE=" + std::to_string(o.nproc),
          "MASTER_ADDR=" + o.master_addr,
          "MASTER_PORT=" + std::to_string(port),
          "OMP_NUM_THREADS=" + threads,
          "MKL_NUM_THREADS=" + threads};
}

}  // namespace

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
    const absl::Status started = Spawn(r, trainer, port);
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

// Each rank in its own process group (so that StopRanks reaches the rank's own children too),
// its stdout and stderr into pipes the launcher relays, and SIGTERM should the launcher die
// without stopping it (a SIGKILLed launcher cannot).
absl::Status Launcher::Spawn(int rank, const std::string& trainer, int port) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError(std::strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    const int saved = errno;
    close(out[0]);
    close(out[1]);
    return absl::InternalError(std::strerror(saved));
  }
  SpawnOptions spawn;
  spawn.argv = {trainer, options_.config};
  spawn.argv.insert(spawn.argv.end(), options_.trainer_args.begin(), options_.trainer_args.end());
  spawn.env = RankVariables(rank, options_, port);
  spawn.stdout_to = Redirect::ToFd(out[1]);
  spawn.stderr_to = Redirect::ToFd(err[1]);
  spawn.parent_death_signal = SIGTERM;
  spawn.exec_error_prefix = absl::StrCat("ringtrain-run: cannot execute trainer '", trainer, "': ");
  absl::StatusOr<Subprocess> process = Subprocess::Start(spawn);
  close(out[1]);
  close(err[1]);
  if (!process.ok()) {
    close(out[0]);
    close(err[0]);
    return process.status();
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  Rank& r = ranks_.emplace_back();
  r.process = *std::move(process);
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
      timeout_ms = static_cast<int>(
          std::max<int64_t>(0, std::chrono::ceil<std::chrono::milliseconds>(left).count()));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      Say(absl::StrCat("poll: ", std::strerror(errno), "; killing all ranks"));
      exit_code_ = exit_code_ == 0 ? 1 : exit_code_;
      stopping_ = true;
      KillRemaining();
      for (Rank& r : ranks_) r.process.Wait();
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
        if (ranks_[r].process.running()) left.push_back(static_cast<int>(r));
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
    if (!rank.process.running() || !rank.process.Poll()) continue;
    const std::optional<int> status = rank.process.wait_status();
    if (!status) continue;  // reaped by someone else: nothing to report
    // Its last lines (often the reason it failed) come before the launcher's verdict.
    Pump(static_cast<int>(r), rank.out, /*drain=*/true);
    Pump(static_cast<int>(r), rank.err, /*drain=*/true);
    if ((WIFEXITED(*status) && WEXITSTATUS(*status) == 0) || stopping_) continue;
    std::string message = absl::StrCat("rank ", r, " ");
    if (WIFEXITED(*status)) {
      absl::StrAppend(&message, "exited with status ", WEXITSTATUS(*status));
    } else {
      absl::StrAppend(&message, "was killed by signal ", SignalName(WTERMSIG(*status)));
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
  // Each rank's whole process group, so that its own children stop too.
  for (Rank& r : ranks_) r.process.Signal(SIGTERM);
}

void Launcher::KillRemaining() {
  killed_ = true;
  for (Rank& r : ranks_) r.process.Signal(SIGKILL);
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
    if (r.process.running()) return false;
  }
  return true;
}

}  // namespace ringtrain
