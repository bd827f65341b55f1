// Ctrl-C while following a job (`ringctl watch`, `submit --follow`). The job runs on the cluster,
// not in this process, so an interrupt stops the following only and says so — the job keeps
// running, and how to cancel it — unless the user asked for torchrun's behaviour
// (`--cancel-on-interrupt`): then the job is cancelled first. Either way ringctl exits 130, as a
// shell expects of a command ended by SIGINT.
#ifndef RINGTRAIN_CLIENT_INTERRUPT_H_
#define RINGTRAIN_CLIENT_INTERRUPT_H_

#include <signal.h>

#include <string>
#include <thread>

#include "client/coordinator_client.h"

namespace ringtrain {

// The exit status after an interrupt (128 + SIGINT).
inline constexpr int kExitInterrupted = 130;

// What ringctl prints when the following of `job_id` is interrupted and the job is left running.
std::string LeftRunningNote(const std::string& job_id);

// While alive, SIGINT ends the process from a thread of its own (a signal handler may do nothing
// but write to a pipe): it prints LeftRunningNote on stderr — or, with `cancel`, cancels the job
// through `client` (a 5 s deadline) and prints the outcome — then exits kExitInterrupted without
// unwinding the thread that follows the job. One per process at a time; the destructor puts the
// previous SIGINT disposition back. `client` must outlive it (it is thread-safe).
class FollowInterrupt {
 public:
  FollowInterrupt(CoordinatorClient* client, std::string job_id, bool cancel);
  ~FollowInterrupt();
  FollowInterrupt(const FollowInterrupt&) = delete;
  FollowInterrupt& operator=(const FollowInterrupt&) = delete;

 private:
  // The thread: waits on the pipe; a byte of 1 is an interrupt, 0 the destructor's stop.
  void Wait();
  // Reports and ends the process.
  [[noreturn]] void Interrupted();

  CoordinatorClient* client_;
  const std::string job_id_;
  const bool cancel_;
  int pipe_[2] = {-1, -1};
  struct sigaction previous_ {};
  std::thread thread_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_INTERRUPT_H_
