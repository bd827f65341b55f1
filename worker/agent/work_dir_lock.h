// Taking over an agent's --work-dir: at most one agent works in a folder at a time, and an agent
// started where a predecessor died (SIGKILL, a crash) stops the trainers that one left running
// before it starts any of its own. Both are called from agent_main.cc, in this order, before the
// agent registers.
#ifndef RINGTRAIN_WORKER_AGENT_WORK_DIR_LOCK_H_
#define RINGTRAIN_WORKER_AGENT_WORK_DIR_LOCK_H_

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringtrain {

constexpr char kAgentLockFileName[] = "agent.lock";

// An exclusive flock(2) on <work_dir>/agent.lock, held until the object is destroyed or the
// process ends (however it ends: the kernel releases it). The file holds the holder's pid, for the
// error a second agent gets; it is left in place (removing a lock file races with its next taker).
// The descriptor is close-on-exec, so trainers never inherit the lock (a trainer left running would
// otherwise keep its agent's successor out). Movable; not thread-safe (nothing to share).
class WorkDirLock {
 public:
  // Takes the lock without waiting. `work_dir` must exist. FAILED_PRECONDITION naming the folder
  // and the pid that holds it when another process does (another agent: give each its own
  // --work-dir); INTERNAL naming the file when it cannot be opened, locked or written.
  static absl::StatusOr<WorkDirLock> Acquire(const std::string& work_dir);

  WorkDirLock(WorkDirLock&& other) noexcept;
  WorkDirLock& operator=(WorkDirLock&& other) noexcept;
  WorkDirLock(const WorkDirLock&) = delete;
  WorkDirLock& operator=(const WorkDirLock&) = delete;
  ~WorkDirLock();  // releases the lock

  const std::string& path() const { return path_; }

 private:
  WorkDirLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd_ = -1;
  std::string path_;
};

// A trainer a previous agent left running, as StopLeftoverTrainers found it.
struct LeftoverTrainer {
  std::string job_id;
  int rank = -1;
  pid_t pid = -1;
  bool ended = false;  // gone within the wait after SIGKILL
};

// Scans <work_dir>/*/rank-*/trainer.pid (trainer_pid_file.h). A record whose process still runs
// (same pid, boot and start time) is a trainer a previous agent left: it gets SIGKILL, with its
// process group while it leads it (never a group it does not lead), and the call waits up to
// `wait` for it to go, logging one line each (job, rank, pid). A record of a process that is gone
// (or of a pid now used by another process), or a file that holds no record, is stale. Files are
// removed, except that of a trainer that did not end within `wait` (stuck in the kernel: the next
// agent tries again). Call it holding the WorkDirLock, before any trainer of this agent starts.
// Returns the leftovers, stale ones not included; problems reading the folder are logged and
// skipped, never fatal.
std::vector<LeftoverTrainer> StopLeftoverTrainers(
    const std::string& work_dir, std::chrono::milliseconds wait = std::chrono::milliseconds(10000));

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_WORK_DIR_LOCK_H_
