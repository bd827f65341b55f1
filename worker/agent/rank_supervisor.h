// The agent's process-supervision core: starts one `ringtrain-trainer` for one rank, relays the
// step reports it writes to <work_dir>/metrics.jsonl, watches its progress file for a hang
// (hang_detector.h), writes its stdout and stderr to <work_dir>/rank.log with a timestamp per line
// (rank_log.h), keeps the tail of its stderr, reports how it ended, and stops it (with its whole
// process group) on cancel. No LibTorch, no gRPC.
#ifndef RINGTRAIN_WORKER_AGENT_RANK_SUPERVISOR_H_
#define RINGTRAIN_WORKER_AGENT_RANK_SUPERVISOR_H_

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/subprocess.h"
#include "worker/agent/hang_detector.h"
#include "worker/agent/rank_log.h"

namespace ringtrain {

struct RankLaunch {
  std::string trainer_path;            // an executable file
  std::string config_path;             // passed as the first argument
  std::vector<std::string> overrides;  // passed verbatim after config_path ("--key=value")
  int rank = 0;
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
  std::string host_address;  // RINGTRAIN_HOST_ADDRESS: where other ranks reach this one (Gloo)
  std::string device;        // "cpu" or "cuda:N"
  std::string work_dir;      // created if missing; holds rank.log, metrics.jsonl, progress.json and
                             // trainer.pid
  int threads = 1;           // OMP_NUM_THREADS and MKL_NUM_THREADS
  // When the trainer counts as hung (hang_detector.h): (a) no new beat in progress.json for
  // hang.silence_limit (hang.startup_grace more before the first beat), (b) a beat saying
  // `compute` for hang.stall_limit. Each 0 = off, the default. Turn (a) on only for trainers known
  // to write the progress file: one that never does is reported hung once the grace has passed.
  HangLimits hang;
  // > 0: the trainer replaces a lost rank in generation n of a run healing in place
  // (RINGTRAIN_HEAL_GENERATION).
  int64_t heal_generation = 0;
};

// Where the trainer of a launch reads heal instructions (RINGTRAIN_CONTROL_FILE, in its work dir;
// common/record/heal_instruction.h).
std::string ControlFilePath(const std::string& work_dir);

struct RankExit {
  int exit_status = -1;  // the exit status when the trainer exited, else -1
  int signal = 0;        // the signal that killed it, else 0
  // Its last 40 lines of stderr, '\n'-separated, each cut to at most 4096 bytes on a character
  // boundary; always valid UTF-8 (a byte that is not is replaced by U+FFFD), so it can go into a
  // protobuf string as it is.
  std::string stderr_tail;
};

// Thread-safety: Cancel() may be called from any thread, concurrently. The callbacks run on the
// supervisor's own monitor thread, one at a time, never while a lock of the supervisor is held, so
// they may call Cancel(); they must not destroy the supervisor (the destructor joins that thread).
//
// Start() sets PR_SET_PDEATHSIG (SIGKILL) in the trainer, which the kernel ties to the *thread*
// that forks it: the trainer is killed when the thread that called Start() ends, not only when the
// process does. Call Start() from a thread that lives as long as the trainer should (in the agent
// the thread that runs Agent::Run, which is main's; Run waits for its rank to end before it
// returns). In exchange an agent killed by SIGKILL takes its trainer with it: nothing keeps the
// device or the rendezvous port. Only the trainer gets the signal, not processes it started.
class RankSupervisor {
 public:
  struct Callbacks {
    // Each complete line of metrics.jsonl (without its '\n'), in file order, exactly once.
    std::function<void(const std::string& json_line)> on_record;
    // Exactly once, after the process is reaped and every complete line has been delivered.
    std::function<void(const RankExit&)> on_exit;
    // At most once, when the trainer counts as hung (RankLaunch::hang), with a sentence saying how
    // (e.g. "no heartbeat from the trainer for 10.2 s (process stopped or frozen; last step 12)",
    // "computing for 61.0 s without reaching a collective or a step boundary (deadlock?; last
    // step 12)"). Only while the process runs unreaped and has not been cancelled, so always before
    // on_exit. The supervisor does not stop the trainer: whoever decides calls Cancel().
    std::function<void(const std::string& reason)> on_hung;
  };

  // Starts `trainer_path config_path overrides... --metrics.jsonl=<work_dir>/metrics.jsonl
  // --device=<device>` with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, OMP_NUM_THREADS,
  // RINGTRAIN_PROGRESS_FILE=<work_dir>/progress.json (and RINGTRAIN_HOST_ADDRESS when host_address
  // is set) added to this process's environment, in a new process group, stdin from /dev/null,
  // stdout and stderr through pipes into <work_dir>/rank.log (appended to: rank_log.h's records,
  // each line stamped when read, with the agent's own lines saying when the trainer started and
  // how it ended), SIGKILL as its parent
  // death signal (see the class comment). A metrics.jsonl or progress.json left from an earlier
  // run is removed first, so no stale record or beat is read. The trainer's pid, process group and
  // start time are written to <work_dir>/trainer.pid (trainer_pid_file.h), removed once it is
  // reaped, so that an agent restarted after a crash can stop it (work_dir_lock.h).
  // Errors: INVALID_ARGUMENT for a bad launch (names the field); NOT_FOUND or FAILED_PRECONDITION,
  // naming the path, when trainer_path does not exist or is not executable (checked before fork,
  // so no callback runs); INTERNAL when the work dir, log, pipe or fork fails. An exec that fails
  // after all is reported through on_exit with exit_status 127 and the reason in stderr_tail.
  // The trainer starts as a Subprocess (common/subprocess.h), so with a clean signal state; what
  // it leaves behind in its process group is killed as soon as it is reaped.
  static absl::StatusOr<std::unique_ptr<RankSupervisor>> Start(const RankLaunch& launch,
                                                               Callbacks callbacks);

  RankSupervisor(const RankSupervisor&) = delete;
  RankSupervisor& operator=(const RankSupervisor&) = delete;
  // Cancel(kDestructorGrace), then waits for the process to end and on_exit to return.
  ~RankSupervisor();

  // Sends SIGTERM to the process group now and returns; the monitor thread sends SIGKILL once
  // `grace` has passed if the trainer is still alive (checked every 100 ms). A second call can only
  // bring that deadline nearer. Does nothing once the trainer has been reaped.
  void Cancel(std::chrono::milliseconds grace);

  pid_t pid() const { return pid_; }  // also the process-group id

  static constexpr std::chrono::milliseconds kDestructorGrace{500};
  static constexpr size_t kStderrTailLines = 40;
  // Longer stderr lines are cut in the tail (not in rank.log), on a character boundary.
  static constexpr size_t kMaxTailLineBytes = 4096;

 private:
  using Clock = std::chrono::steady_clock;

  RankSupervisor(Callbacks callbacks, const RankLaunch& launch, int log_fd, int stdout_fd,
                 int stderr_fd, Subprocess process, Clock::time_point started);

  // Reaps, tails metrics.jsonl, watches progress.json, enforces the kill deadline, calls on_hung
  // and on_exit.
  void MonitorLoop();
  // Copies the stdout and stderr pipes to rank.log, a record per line, and keeps stderr's tail.
  void OutputLoop();
  // A line of `stream` (0 stdout, 1 stderr), or with !ends_line a cut piece of a long one.
  void OutputLine(int stream, const std::string& line, bool ends_line);
  // Reads what metrics.jsonl has gained and returns its new complete lines. Monitor thread only.
  std::vector<std::string> ReadNewRecords();
  void Deliver(const std::vector<std::string>& lines);
  std::string StderrTail();

  const Callbacks callbacks_;
  const std::string metrics_path_;
  const std::string progress_path_;
  const std::string pid_file_path_;  // trainer.pid
  const bool watch_progress_;        // launch.hang.enabled()
  const int log_fd_;                 // rank.log, O_APPEND; closed by the destructor
  RankLogWriter log_;                // over log_fd_
  const int stdout_fd_;              // read end of the child's stdout pipe; closed by OutputLoop
  const int stderr_fd_;              // read end of the child's stderr pipe; closed by OutputLoop
  const pid_t pid_;                  // process_.pid(), readable without the lock

  // Monitor thread only.
  int metrics_fd_ = -1;
  std::string metrics_pending_;  // bytes read that do not yet end a line
  HangDetector hang_;

  absl::Mutex mu_;
  Subprocess process_ ABSL_GUARDED_BY(mu_);  // sends no signal once reaped (pid reuse)
  bool term_sent_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Clock::time_point> kill_deadline_ ABSL_GUARDED_BY(mu_);
  std::optional<Clock::time_point> stderr_drain_deadline_ ABSL_GUARDED_BY(mu_);
  // Raw bytes, each line cut at kTailLineKeepBytes; made valid UTF-8 and cut on a character
  // boundary by StderrTail. stderr_partial_ is a long line whose cut pieces are still coming.
  std::deque<std::string> stderr_lines_ ABSL_GUARDED_BY(mu_);
  std::string stderr_partial_ ABSL_GUARDED_BY(mu_);

  std::thread output_thread_;  // joined by the monitor thread
  std::thread monitor_thread_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_RANK_SUPERVISOR_H_
