// The one rank an agent runs at a time: its RankSupervisor, which job, rank and run (attempt) it
// is, whether it still runs, and the RankExit it ended with. The slot queues the rank's messages on
// the agent's Outbox in the order the coordinator must read them — RankStarted, rank 0's
// RankReports (every rank's records go to AgentMetrics; only rank 0's go upstream), a RankHung if
// the supervisor judges it hung, RankExit — and queues the exit before the rank counts as ended,
// so whoever sees !active() finds the exit already queued.
//
// Thread-safety: thread-safe. A caller may hold a lock of its own while calling in, except around
// Release() (see there); the slot takes its own lock and then the outbox's, never a caller's.
// `on_change` runs on the supervisor's monitor thread, with no lock of the slot held, each time
// that thread has queued a record or the exit (the exit: once the rank counts as ended); it may
// call back into the slot except Release(). What a caller's own call queues (Start's RankStarted,
// RequeueExit) runs no on_change: the caller knows.
#ifndef RINGTRAIN_WORKER_AGENT_RANK_SLOT_H_
#define RINGTRAIN_WORKER_AGENT_RANK_SLOT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ringtrain/v1/worker_service.pb.h"
#include "worker/agent/agent_metrics.h"
#include "worker/agent/outbox.h"
#include "worker/agent/rank_supervisor.h"

namespace ringtrain {

// A RankExit message as the coordinator reads it.
v1::AgentMessage RankExitMessage(const std::string& job_id, int rank, int attempt, int exit_status,
                                 int signal, const std::string& stderr_tail);

class RankSlot {
 public:
  // `outbox` and `metrics` must outlive the slot.
  RankSlot(Outbox* outbox, AgentMetrics* metrics, std::function<void()> on_change);
  RankSlot(const RankSlot&) = delete;
  RankSlot& operator=(const RankSlot&) = delete;
  // Release().
  ~RankSlot();

  struct Info {
    bool active = false;  // started, and its exit not yet reported
    std::string job_id;   // the current or last rank's job; "" before the first
    int rank = 0;
    int attempt = 0;        // its run (Assignment.attempt)
    bool stopping = false;  // active, and Cancel() has asked it to stop
  };
  Info info() const;
  bool active() const;

  // Starts `launch` for run `attempt` of `job_id` (RankSupervisor::Start) in the outbox's current
  // epoch and queues its RankStarted; the rank's records and exit are queued in that epoch too
  // (dropped once Outbox::DropAll() has moved on). The previous rank's supervisor, unless
  // Release()d, is destroyed on the way out. FAILED_PRECONDITION while a rank is active;
  // RankSupervisor::Start's errors (the slot then keeps its last rank's info).
  absl::Status Start(const RankLaunch& launch, const std::string& job_id, int attempt);

  // Cancels the active rank (RankSupervisor::Cancel: SIGTERM now, SIGKILL after `grace`) if there
  // is one and, when `job_id` is non-empty, it belongs to that job. Returns whether it did.
  bool Cancel(std::chrono::milliseconds grace, absl::string_view job_id = "");

  // Waits until no rank is active or `timeout` has passed (then logs that the rank is left
  // running). Returns whether no rank is active.
  bool AwaitEnd(absl::Duration timeout);

  // For a Cancel naming a rank that no longer runs here: when the last rank was (job_id, rank,
  // attempt) and has ended, queues its RankExit again unless one is still queued (the coordinator
  // refused or never read the first), and returns true; false when the slot never ran it.
  bool RequeueExit(const std::string& job_id, int rank, int attempt);

  // Destroys the supervisor of the current or last rank, which stops a rank still running
  // (~RankSupervisor) and waits for its monitor thread — so it runs on_change when the rank had not
  // ended. Never call it while holding a lock that on_change takes, nor from on_change.
  void Release();

 private:
  bool Ended() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !active_; }

  Outbox* const outbox_;
  AgentMetrics* const metrics_;
  const std::function<void()> on_change_;

  mutable absl::Mutex mu_;
  // Destroyed only outside mu_ and outside its own callbacks (Release).
  std::unique_ptr<RankSupervisor> supervisor_ ABSL_GUARDED_BY(mu_);
  bool active_ ABSL_GUARDED_BY(mu_) = false;    // started, on_exit not yet called
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // Cancel() signalled the active rank
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  int rank_ ABSL_GUARDED_BY(mu_) = 0;
  int attempt_ ABSL_GUARDED_BY(mu_) = 0;
  // The last rank's RankExit, if it was queued in its epoch.
  std::optional<v1::AgentMessage> last_exit_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_RANK_SLOT_H_
