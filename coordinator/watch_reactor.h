// The server side of JobService.WatchJob: one reactor per watching client. It first replays the
// job's history from the store (state changes, then step events from `from_step`, then the final
// state change), then follows the job live through the EventHub, and finishes the stream after the
// job's final state change. A client that reads slowly never slows anyone else: live events go to a
// bounded buffer (kLiveBufferEvents); when it overflows the buffer is dropped and the reactor
// catches up from the store again, so the client still sees every step once, in order. The store
// is never read inside a reaction (nor in OnJobEvent, under the hub's lock): each page is read by a
// task on the `loader` executor, which then starts the next write.
#ifndef RINGTRAIN_COORDINATOR_WATCH_REACTOR_H_
#define RINGTRAIN_COORDINATOR_WATCH_REACTOR_H_

#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/event_hub.h"
#include "coordinator/job_store.h"
#include "coordinator/serial_executor.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

class WatchReactor : public grpc::ServerWriteReactor<v1::JobEvent>, public JobEventSink {
 public:
  static constexpr size_t kLiveBufferEvents = 1024;
  static constexpr int64_t kReplayPageSteps = 256;  // step events read from the store at a time

  // `store`, `hub` and `rpcs` must outlive the reactor; `loader` must outlive it and run every
  // task it is given (a SerialExecutor destroyed after the server is shut down does). The job
  // must exist. Deletes itself in OnDone, or, when a page is being read then, once the read ends.
  // `rpcs` counts the stream when it finishes.
  WatchReactor(JobStore* store, EventHub* hub, RpcCounter* rpcs, Executor* loader,
               std::string job_id, int64_t from_step);

  void OnJobEvent(const v1::JobEvent& event) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Starts the next write if none is in flight; finishes after the final state change.
  void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Has the loader read the next page from the store (LoadReplayPage). Requires replay_ empty.
  void StartLoad() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The loader's task: reads a page without mu_ held, then refills replay_ and pumps (or, after
  // OnDone, deletes the reactor).
  void LoadReplayPage() ABSL_LOCKS_EXCLUDED(mu_);
  // Refills replay_ from a page read from the store; false when the store has nothing this watcher
  // has not sent.
  bool FillReplay(const std::vector<StateChange>& changes, const std::vector<StepEvent>& steps)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `event` is new to this watcher (not already sent through replay or live).
  bool IsNew(const v1::JobEvent& event) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishOnce(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobStore* const store_;
  EventHub* const hub_;
  RpcCounter* const rpcs_;
  Executor* const loader_;
  const std::string job_id_;

  absl::Mutex mu_;
  bool catching_up_ ABSL_GUARDED_BY(mu_) = true;  // replaying from the store
  std::deque<v1::JobEvent> replay_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::JobEvent> live_ ABSL_GUARDED_BY(mu_);
  int64_t next_step_ ABSL_GUARDED_BY(mu_);           // the lowest step not yet sent
  int64_t last_state_seq_ ABSL_GUARDED_BY(mu_) = 0;  // the seq of the last state change sent
  v1::JobEvent in_flight_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool final_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // A page is being read: nothing is written meanwhile, so next_step_ and last_state_seq_ stay as
  // the read found them.
  bool loading_ ABSL_GUARDED_BY(mu_) = false;
  bool dropped_live_ ABSL_GUARDED_BY(mu_) = false;  // live_ overflowed since the load started
  bool done_ ABSL_GUARDED_BY(mu_) = false;          // OnDone has run
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_WATCH_REACTOR_H_
