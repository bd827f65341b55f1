#include "worker/agent/rank_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/printable.h"
#include "worker/agent/trainer_pid_file.h"

namespace ringtrain {
namespace {

constexpr std::chrono::milliseconds kPollInterval{100};
// After the trainer exits, how long its stderr pipe may stay open (held by a straggler) before
// the tail is reported without the rest.
constexpr std::chrono::milliseconds kStderrDrain{1000};
// Raw bytes kept of a stderr line: kMaxTailLineBytes and 3 more, so that a character that starts
// before the cut is whole when the tail is made valid UTF-8, and Utf8Prefix drops it whole (cut
// short, its bytes would become U+FFFD instead).
constexpr size_t kTailLineKeepBytes = RankSupervisor::kMaxTailLineBytes + 3;
constexpr char kProgressFileName[] = "progress.json";
constexpr char kControlFileName[] = "control.json";

std::string ErrnoText() { return std::strerror(errno); }

// Removes a file an earlier run left, so that nothing stale of it is read.
absl::Status RemoveStale(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("cannot remove stale '", path, "': ", ErrnoText()));
  }
  return absl::OkStatus();
}

// Moves the step records an earlier run of this rank left here aside, to <path>.1, .2, … (the
// first free): the new run's records start a file of their own, which the supervisor relays from
// its start, and the earlier ones stay where a StepRecordsRequest reads them (step_records.h) —
// they may be records no coordinator has stored yet.
absl::Status KeepEarlierRecords(const std::string& path) {
  if (access(path.c_str(), F_OK) != 0) return absl::OkStatus();
  for (int n = 1;; ++n) {
    const std::string kept = absl::StrCat(path, ".", n);
    if (access(kept.c_str(), F_OK) == 0) continue;
    if (rename(path.c_str(), kept.c_str()) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot move the earlier '", path, "' to '", kept, "': ", ErrnoText()));
    }
    return absl::OkStatus();
  }
}

// The rendezvous variables of the launch: they replace inherited ones of the same names.
std::vector<std::string> ChildVariables(const RankLaunch& launch) {
  std::vector<std::string> env = {
      "RANK=" + std::to_string(launch.rank),
      "WORLD_SIZE=" + std::to_string(launch.world_size),
      "MASTER_ADDR=" + launch.master_addr,
      "MASTER_PORT=" + std::to_string(launch.master_port),
      "OMP_NUM_THREADS=" + std::to_string(launch.threads),
      "MKL_NUM_THREADS=" + std::to_string(launch.threads),
      // Every rank writes its own <work_dir>/metrics.jsonl, so every agent sees its rank's figures.
      "RINGTRAIN_JSONL_EVERY_RANK=1",
      // The trainer beats here (hang_detector.h), whether or not this supervisor watches.
      "RINGTRAIN_PROGRESS_FILE=" + launch.work_dir + "/" + kProgressFileName,
  };
  if (!launch.host_address.empty()) env.push_back("RINGTRAIN_HOST_ADDRESS=" + launch.host_address);
  // Heal instructions come here (HandleHeal); a replacement knows its generation from the start.
  env.push_back("RINGTRAIN_CONTROL_FILE=" + ControlFilePath(launch.work_dir));
  if (launch.heal_generation > 0) {
    env.push_back("RINGTRAIN_HEAL_GENERATION=" + std::to_string(launch.heal_generation));
  }
  return env;
}

}  // namespace

std::string ControlFilePath(const std::string& work_dir) {
  return work_dir + "/" + kControlFileName;
}

namespace {

absl::Status CheckLaunch(const RankLaunch& launch) {
  if (launch.trainer_path.empty()) return absl::InvalidArgumentError("trainer_path is empty");
  if (launch.work_dir.empty()) return absl::InvalidArgumentError("work_dir is empty");
  if (launch.world_size < 1 || launch.rank < 0 || launch.rank >= launch.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", launch.rank, " of world_size ",
                                                   launch.world_size,
                                                   ": need 0 <= rank < world_size"));
  }
  if (launch.threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("threads = ", launch.threads, ": need >= 1"));
  }
  for (const auto& [name, limit] : {std::pair{"hang.silence_limit", launch.hang.silence_limit},
                                    std::pair{"hang.stall_limit", launch.hang.stall_limit},
                                    std::pair{"hang.startup_grace", launch.hang.startup_grace}}) {
    if (limit.count() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " = ", limit.count(), " ms: need >= 0 (0 turns it off)"));
    }
  }
  if (access(launch.trainer_path.c_str(), F_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("trainer '", launch.trainer_path, "' does not exist: ", ErrnoText()));
  }
  struct stat st {};
  if (stat(launch.trainer_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      access(launch.trainer_path.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer '", launch.trainer_path, "' is not an executable file"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RankSupervisor>> RankSupervisor::Start(const RankLaunch& launch,
                                                                      Callbacks callbacks) {
  if (absl::Status s = CheckLaunch(launch); !s.ok()) return s;

  std::error_code ec;
  std::filesystem::create_directories(launch.work_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create work_dir '", launch.work_dir, "': ", ec.message()));
  }
  const std::string metrics_path = launch.work_dir + "/metrics.jsonl";
  const std::string progress_path = launch.work_dir + "/" + kProgressFileName;
  const std::string log_path = launch.work_dir + "/rank.log";
  if (absl::Status s = KeepEarlierRecords(metrics_path); !s.ok()) return s;
  const std::string control_path = ControlFilePath(launch.work_dir);
  for (const std::string& stale :
       {progress_path, progress_path + ".tmp", control_path, control_path + ".tmp"}) {
    if (absl::Status s = RemoveStale(stale); !s.ok()) return s;
  }

  // Appended to: a rank that runs here again (a restart) continues its log.
  int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::InternalError(absl::StrCat("cannot open '", log_path, "': ", ErrnoText()));
  }
  int pipe_fds[2];
  int out_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    std::string why = ErrnoText();
    close(log_fd);
    return absl::InternalError("cannot create the stderr pipe: " + why);
  }
  if (pipe2(out_fds, O_CLOEXEC) != 0) {
    std::string why = ErrnoText();
    close(log_fd);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return absl::InternalError("cannot create the stdout pipe: " + why);
  }
  SpawnOptions spawn;
  spawn.argv = {launch.trainer_path, launch.config_path};
  spawn.argv.insert(spawn.argv.end(), launch.overrides.begin(), launch.overrides.end());
  spawn.argv.push_back("--metrics.jsonl=" + metrics_path);
  spawn.argv.push_back("--device=" + launch.device);
  spawn.env = ChildVariables(launch);
  spawn.stdout_to = Redirect::ToFd(out_fds[1]);   // copied to rank.log by OutputLoop
  spawn.stderr_to = Redirect::ToFd(pipe_fds[1]);  // and the tail kept
  // The trainer's stragglers go with it, before its group id could be reused.
  spawn.kill_group_on_exit = true;
  // And the trainer goes with this thread, should the agent die without stopping it (SIGKILL).
  spawn.parent_death_signal = SIGKILL;
  spawn.exec_error_prefix =
      absl::StrCat("rank_supervisor: cannot exec '", launch.trainer_path, "': ");
  const Clock::time_point started = Clock::now();
  absl::StatusOr<Subprocess> process = Subprocess::Start(spawn);
  close(pipe_fds[1]);
  close(out_fds[1]);
  if (!process.ok()) {
    close(log_fd);
    close(pipe_fds[0]);
    close(out_fds[0]);
    return absl::InternalError(
        absl::StrCat("cannot start '", launch.trainer_path, "': ", process.status().message()));
  }

  std::unique_ptr<RankSupervisor> supervisor(new RankSupervisor(
      std::move(callbacks), launch, log_fd, out_fds[0], pipe_fds[0], *std::move(process), started));
  supervisor->log_.Write("agent", absl::StrCat("trainer started: rank ", launch.rank, " of ",
                                               launch.world_size, ", pid ", supervisor->pid_));
  // Right after fork: its start time is fixed at fork, so the record is right even if it has not
  // exec'd yet. A record that cannot be written costs only the cleanup after a crash of the agent.
  absl::StatusOr<TrainerPidRecord> record = RecordOf(supervisor->pid_);
  absl::Status recorded = record.status();
  if (record.ok()) recorded = WriteTrainerPidFile(supervisor->pid_file_path_, *record);
  if (!recorded.ok()) {
    RT_LOG(Warning) << "trainer pid " << supervisor->pid_ << " not recorded: " << recorded.message()
                    << " (an agent restarted after a crash would not find it)";
  }
  RankSupervisor* self = supervisor.get();
  self->output_thread_ = std::thread([self] { self->OutputLoop(); });
  self->monitor_thread_ = std::thread([self] { self->MonitorLoop(); });
  return supervisor;
}

RankSupervisor::RankSupervisor(Callbacks callbacks, const RankLaunch& launch, int log_fd,
                               int stdout_fd, int stderr_fd, Subprocess process,
                               Clock::time_point started)
    : callbacks_(std::move(callbacks)),
      metrics_path_(launch.work_dir + "/metrics.jsonl"),
      progress_path_(launch.work_dir + "/" + kProgressFileName),
      pid_file_path_(launch.work_dir + "/" + kTrainerPidFileName),
      watch_progress_(launch.hang.enabled()),
      log_fd_(log_fd),
      log_(log_fd),
      stdout_fd_(stdout_fd),
      stderr_fd_(stderr_fd),
      pid_(process.pid()),
      hang_(launch.hang, started),
      process_(std::move(process)) {}

RankSupervisor::~RankSupervisor() {
  Cancel(kDestructorGrace);
  if (monitor_thread_.joinable()) monitor_thread_.join();
  if (metrics_fd_ >= 0) close(metrics_fd_);
  close(log_fd_);
}

void RankSupervisor::Cancel(std::chrono::milliseconds grace) {
  absl::MutexLock lock(&mu_);
  if (!process_.running()) return;
  if (!term_sent_) {
    process_.Signal(SIGTERM);
    term_sent_ = true;
  }
  Clock::time_point deadline = Clock::now() + grace;
  if (!kill_deadline_ || deadline < *kill_deadline_) kill_deadline_ = deadline;
}

void RankSupervisor::MonitorLoop() {
  std::optional<int> wait_status;  // nullopt when someone else reaped it (SIGCHLD set to SIG_IGN)
  for (;;) {
    bool exited = false;
    bool cancelled = false;
    {
      absl::MutexLock lock(&mu_);
      // Poll also sends SIGKILL to what the trainer left in its group (kill_group_on_exit).
      if (process_.Poll()) {
        exited = true;
        wait_status = process_.wait_status();
        stderr_drain_deadline_ = Clock::now() + kStderrDrain;
      } else if (kill_deadline_ && Clock::now() >= *kill_deadline_) {
        process_.Signal(SIGKILL);
        kill_deadline_.reset();
      }
      cancelled = term_sent_;
    }
    // Read after the reap check: once the trainer has exited, this read sees everything it wrote.
    Deliver(ReadNewRecords());
    if (exited) break;
    // Only this thread reaps, so the trainer is still unreaped here; a cancelled one is on its way
    // out, and whoever cancelled it needs no verdict.
    if (watch_progress_ && !cancelled) {
      if (std::optional<std::string> reason =
              hang_.Observe(ReadProgressBeat(progress_path_), Clock::now());
          reason && callbacks_.on_hung) {
        callbacks_.on_hung(*reason);
      }
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  unlink(pid_file_path_.c_str());  // reaped: the pid may be reused from now on
  output_thread_.join();

  RankExit exit;
  if (wait_status && WIFEXITED(*wait_status)) exit.exit_status = WEXITSTATUS(*wait_status);
  if (wait_status && WIFSIGNALED(*wait_status)) exit.signal = WTERMSIG(*wait_status);
  exit.stderr_tail = StderrTail();
  // The log's last line for this run, before anyone hears that the rank ended.
  log_.Write("agent", exit.signal != 0 ? absl::StrCat("trainer killed by signal ", exit.signal,
                                                      " (", strsignal(exit.signal), ")")
                      : exit.exit_status >= 0
                          ? absl::StrCat("trainer exited with status ", exit.exit_status)
                          : std::string("trainer ended (reaped elsewhere: no exit status)"));
  if (callbacks_.on_exit) callbacks_.on_exit(exit);
}

std::vector<std::string> RankSupervisor::ReadNewRecords() {
  std::vector<std::string> lines;
  if (metrics_fd_ < 0) {
    metrics_fd_ = open(metrics_path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (metrics_fd_ < 0) return lines;  // not written yet (or never: ranks other than 0)
  }
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = read(metrics_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    metrics_pending_.append(buf, static_cast<size_t>(n));
  }
  size_t start = 0;
  for (size_t nl; (nl = metrics_pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(metrics_pending_.substr(start, nl - start));
  }
  metrics_pending_.erase(0, start);
  return lines;
}

void RankSupervisor::Deliver(const std::vector<std::string>& lines) {
  if (!callbacks_.on_record) return;
  for (const std::string& line : lines) callbacks_.on_record(line);
}

void RankSupervisor::OutputLoop() {
  char buf[16 * 1024];
  int fds[2] = {stdout_fd_, stderr_fd_};
  std::string partial[2];  // bytes of each stream that do not yet end a line
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stderr_drain_deadline_ && Clock::now() >= *stderr_drain_deadline_) break;
    }
    pollfd p[2];
    nfds_t n_open = 0;
    for (int fd : fds) {
      if (fd >= 0) p[n_open++] = pollfd{fd, POLLIN, 0};
    }
    if (n_open == 0) break;  // both closed: every writer has gone
    const int ready = poll(p, n_open, static_cast<int>(kPollInterval.count()));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    for (nfds_t k = 0; k < n_open; ++k) {
      if (p[k].revents == 0) continue;
      const int stream = p[k].fd == stdout_fd_ ? 0 : 1;
      const ssize_t n = read(p[k].fd, buf, sizeof(buf));
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {  // EOF (or a broken pipe): what is left is the stream's last line
        if (!partial[stream].empty()) OutputLine(stream, partial[stream], true);
        partial[stream].clear();
        fds[stream] = -1;
        continue;
      }
      std::string& pending = partial[stream];
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] == '\n') {
          OutputLine(stream, pending, true);
          pending.clear();
        } else {
          pending.push_back(buf[i]);
          if (pending.size() == kMaxRankLogText) {  // a cut piece; the line goes on
            OutputLine(stream, pending, false);
            pending.clear();
          }
        }
      }
    }
  }
  // Drain deadline passed with a pipe still held open by a straggler: keep what was read.
  for (int stream = 0; stream < 2; ++stream) {
    if (!partial[stream].empty()) OutputLine(stream, partial[stream], true);
  }
  close(stdout_fd_);
  close(stderr_fd_);
}

void RankSupervisor::OutputLine(int stream, const std::string& line, bool ends_line) {
  log_.Write(stream == 0 ? "stdout" : "stderr", line);
  if (stream == 0) return;
  absl::MutexLock lock(&mu_);
  std::string& tail = stderr_partial_;  // raw, at most kTailLineKeepBytes of the line
  tail.append(line, 0, kTailLineKeepBytes - std::min(tail.size(), kTailLineKeepBytes));
  if (!ends_line) return;
  stderr_lines_.push_back(std::move(tail));
  tail.clear();
  if (stderr_lines_.size() > kStderrTailLines) stderr_lines_.pop_front();
}

std::string RankSupervisor::StderrTail() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> lines(stderr_lines_.begin(), stderr_lines_.end());
  if (!stderr_partial_.empty()) {
    lines.push_back(stderr_partial_);
    if (lines.size() > kStderrTailLines) lines.erase(lines.begin());
  }
  // Valid UTF-8 first (a trainer may print raw bytes; protobuf refuses them), then the cut, which
  // on valid text drops a character that straddles it whole.
  for (std::string& line : lines) {
    line = std::string(Utf8Prefix(ValidUtf8(line), kMaxTailLineBytes));
  }
  return absl::StrJoin(lines, "\n");
}

}  // namespace ringtrain
