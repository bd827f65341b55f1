// ringtrain-run: this project's torchrun. Starts N trainer ranks on this machine with a fresh
// MASTER_ADDR/MASTER_PORT rendezvous, relays their output line by line with a "[rank r] " prefix,
// and takes the whole job down as soon as one rank fails or the launcher is interrupted.
// No LibTorch here: the launcher must build and run where only POSIX and Abseil are.
#ifndef RINGTRAIN_WORKER_LAUNCHER_LAUNCHER_H_
#define RINGTRAIN_WORKER_LAUNCHER_LAUNCHER_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/subprocess.h"
#include "worker/launcher/launch_args.h"

namespace ringtrain {

// Runs one job. Not thread-safe, and at most one Launcher may Run at a time in a process: Run
// installs handlers for SIGINT, SIGTERM and SIGCHLD (restored when it returns) and ignores SIGPIPE
// meanwhile, so that a closed stdout cannot kill the launcher and orphan its ranks.
class Launcher {
 public:
  explicit Launcher(LaunchOptions options);
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;
  ~Launcher();

  // Starts the ranks and waits for all of them; call it once. Returns the launcher's exit code:
  // 0 when every rank exited 0; 1 when a rank failed (or could not be started); 128 + signal when
  // the launcher was asked to stop by SIGINT or SIGTERM.
  int Run();

 private:
  using Clock = std::chrono::steady_clock;

  // One child's output stream: bytes read so far that do not yet end a line.
  struct Stream {
    int fd = -1;      // read end of the child's pipe, -1 once closed
    int out_fd = -1;  // where its lines go: STDOUT_FILENO or STDERR_FILENO
    std::string pending;
  };
  struct Rank {
    Subprocess process;  // in its own process group, which StopRanks signals as a whole
    Stream out, err;
  };

  absl::Status Spawn(int rank, const std::string& trainer, int port);
  void Supervise();
  void OnSignal(int signo);
  void ReapExited();
  // The first call says why, fixes the exit code, sends SIGTERM to the process group of every
  // rank still running and starts the grace period; later calls do nothing.
  void StopRanks(const std::string& why, int exit_code);
  void KillRemaining();  // SIGKILL to the process group of every rank still running
  // Reads what `s` has now (once, or until the pipe is empty if `drain`) and emits whole lines; at
  // EOF flushes the last partial line and closes. Returns whether the stream is still open.
  bool Pump(int rank, Stream& s, bool drain);
  void CloseStream(int rank, Stream& s);
  void Emit(int rank, const Stream& s, const std::string& line);
  void Say(const std::string& message);  // "ringtrain-run: message" on stderr
  bool AllReaped() const;

  LaunchOptions options_;
  std::vector<Rank> ranks_;
  int signal_pipe_[2] = {-1, -1};  // written by the signal handler, polled by Supervise
  bool stopping_ = false;
  bool killed_ = false;  // SIGKILL already sent
  int exit_code_ = 0;
  Clock::time_point kill_deadline_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_LAUNCHER_LAUNCHER_H_
