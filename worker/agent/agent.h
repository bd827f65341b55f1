// The worker agent: registers with the coordinator, keeps one WorkerService.Session open (and
// reopens it when it breaks), runs one ringtrain-trainer at a time (RankSlot, rank_slot.h) for the
// assignments that arrive on it, and relays what the trainer reports through its Outbox
// (outbox.h). No LibTorch.
//
// One class, one file per part of its work:
//   agent.cc          Create, Shutdown, Run: registering, and reopening sessions with backoff
//   agent_session.cc  one session: Hello, then each message the coordinator sends, in turn
//   agent_writer.cc   the session's writer: heartbeats, the outbox, replies, closing our side
//   agent_ranks.cc    what the coordinator asks of the ranks: assignments, cancels, step records
// Its options and their check: agent_options.h.
#ifndef RINGTRAIN_WORKER_AGENT_AGENT_H_
#define RINGTRAIN_WORKER_AGENT_AGENT_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ringtrain/v1/worker_service.grpc.pb.h"
#include "worker/agent/agent_metrics.h"
#include "worker/agent/agent_options.h"
#include "worker/agent/device_probe.h"
#include "worker/agent/log_server.h"
#include "worker/agent/outbox.h"
#include "worker/agent/rank_slot.h"
#include "worker/agent/rank_supervisor.h"

namespace ringtrain {

// Thread-safety: Run() is called once, on a thread of the caller's choosing; Shutdown() may be
// called from any thread, any number of times, before or during Run(). The object must outlive
// Run() (destroy it only after Run() has returned). The other public methods may be called from
// any thread. Threads of its own: the session's writer (one per session, joined before the
// session returns), the LogServer's, the RankSlot's supervisor's, and the one Shutdown() starts
// during Run() (joined by the destructor); every callback they run captures `this`.
class Agent {
 public:
  // Checks the options (device, threads, trainer executable), makes work_dir absolute and creates
  // it; probes the device's name and memory (device_probe.h; a failed probe is logged as a
  // warning and the device registered as "unknown (why)" with memory 0); makes data_root (must
  // exist) and checkpoint_root (created) absolute and canonical.
  // INVALID_ARGUMENT or FAILED_PRECONDITION naming the flag and what would work.
  // (agent_options.h: DeviceKind, CheckAgentOptions.)
  static absl::StatusOr<std::unique_ptr<Agent>> Create(AgentOptions options);

  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;
  ~Agent();

  // Registers, then serves sessions until Shutdown(): a broken session is reopened with backoff
  // (same worker id and credential; after NOT_FOUND or UNAUTHENTICATED the agent registers again
  // asking for its id and running rank back, proving the id with its credential, and stops the
  // rank only if the coordinator does not adopt it), a coordinator that cannot be reached is
  // retried forever. On Shutdown the running trainer is cancelled, its RankExit sent
  // if a session is up, the stream closed (WritesDone, then cancel) and OK returned. Returns an
  // error only when the coordinator rejects the registration (INVALID_ARGUMENT, UNAUTHENTICATED).
  absl::Status Run() ABSL_LOCKS_EXCLUDED(mu_);

  // Makes Run() wind down and return; never blocks.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // The id of the current registration ("" before the first one). For tests and logs.
  std::string worker_id() ABSL_LOCKS_EXCLUDED(mu_);

  // The agent's Prometheus metrics (its own state and its trainer's figures), to be served.
  std::shared_ptr<AgentMetrics> metrics() const { return metrics_; }

 private:
  using Stream = grpc::ClientReaderWriter<v1::AgentMessage, v1::CoordinatorMessage>;
  using Clock = std::chrono::steady_clock;

  Agent(AgentOptions options, std::string device_kind, DeviceInfo device_info);

  // agent.cc: Run's thread, unless said otherwise.
  absl::Status Register() ABSL_LOCKS_EXCLUDED(mu_);
  // When a re-registration did not get the rank adopted: drops the outbox (and with its epoch
  // whatever the rank still sends), cancels the running rank and waits for it to end.
  // (agent_ranks.cc.)
  void OrphanRank() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether Register asked for OrphanRank (and clears the request).
  bool TakeOrphanPending() ABSL_LOCKS_EXCLUDED(mu_);
  // Sleeps `delay` unless Shutdown() comes first; returns false then.
  bool SleepUnlessStopped(std::chrono::milliseconds delay) ABSL_LOCKS_EXCLUDED(mu_);
  bool StopRequested() ABSL_LOCKS_EXCLUDED(mu_);  // any thread
  // Started by Shutdown() during Run(), on a thread of its own: cancels the call if it is still
  // open well after stop_deadline_ (a Write stuck on a coordinator that stopped reading).
  void ForceStopLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces channel_ and stub_ with ones that share no connection state with the old.
  void NewChannel();
  bool RunReturned() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !running_; }

  // agent_session.cc: one Session, on Run's thread. Hello, then reads until the stream ends, with
  // WriterLoop on a second thread. `opened` says whether Hello was written (else the coordinator
  // could not be reached).
  grpc::Status RunSession(bool* opened) ABSL_LOCKS_EXCLUDED(mu_);
  bool WriterStopped() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !writer_running_; }

  // agent_writer.cc. WriterLoop is the only thread that writes to `stream` after Hello: heartbeats
  // every `interval`, the outbox and the replies, in order; `stream` and `context` are
  // RunSession's and outlive it.
  void WriterLoop(Stream* stream, grpc::ClientContext* context, std::chrono::milliseconds interval)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until WriterHasWork() or `deadline`. The writer's work also lies in outbox_ and rank_,
  // which have locks of their own, so a Condition cannot read it: whatever may give the writer
  // work sets writer_wakeup_ afterwards (WakeWriter), and the writer clears it before it looks.
  void AwaitWriterWork(Clock::time_point deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WriterHasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Any thread (the rank's callbacks too).
  void WakeWriter() ABSL_LOCKS_EXCLUDED(mu_);
  // Queues `message` in the outbox's current epoch and wakes the writer.
  void QueueLocked(v1::AgentMessage message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // agent_ranks.cc: on the session's reading thread (RunSession).
  void HandleAssignment(const v1::Assignment& assignment) ABSL_LOCKS_EXCLUDED(mu_);
  void HandleCancel(const v1::Cancel& cancel) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes the heal instruction to the trainer's control file when it runs the rank named.
  void HandleHeal(const v1::Heal& heal) ABSL_LOCKS_EXCLUDED(mu_);
  // Answers from this work dir's record files (step_records.h), queued on replies_.
  void HandleStepRecordsRequest(const v1::StepRecordsRequest& request) ABSL_LOCKS_EXCLUDED(mu_);

  const AgentOptions options_;
  const std::string device_kind_;
  const DeviceInfo device_info_;  // what Register reports (device_probe.h), probed once in Create
  // The channel to the coordinator; a new one (NewChannel) before each attempt after one that
  // could not reach it. Used by Run's thread only (the writer uses the session's stream).
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  const std::shared_ptr<AgentMetrics> metrics_;

  // What the coordinator has yet to hear, kept across sessions (its own lock).
  Outbox outbox_;

  // The session: lock order mu_, then rank_'s, then outbox_'s.
  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // inside Run()
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point stop_deadline_ ABSL_GUARDED_BY(mu_);  // close the stream by then regardless
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  // The session credential of worker_id_ (RegisterResponse.credential): sent in every Hello, and
  // as previous_credential when registering again. In memory only, never logged.
  std::string credential_ ABSL_GUARDED_BY(mu_);
  // Set after NOT_FOUND (the coordinator restarted): the next Register asks for this id and the
  // running rank back.
  std::string previous_worker_id_ ABSL_GUARDED_BY(mu_);
  bool orphan_pending_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::milliseconds heartbeat_interval_ ABSL_GUARDED_BY(mu_){1000};
  // The Register or Session call in flight. Shutdown() cancels it unless the writer is running
  // (the writer then closes the stream itself, after the last RankExit).
  grpc::ClientContext* call_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool writer_running_ ABSL_GUARDED_BY(mu_) = false;
  bool session_over_ ABSL_GUARDED_BY(mu_) = false;  // the reader has stopped; the writer must too
  // The coordinator sent Welcome on this session: until then only heartbeats are written, so
  // nothing queued is lost in a stream the coordinator refuses (NOT_FOUND after its restart).
  bool welcomed_ ABSL_GUARDED_BY(mu_) = false;
  bool writer_wakeup_ ABSL_GUARDED_BY(mu_) = false;  // see AwaitWriterWork

  // The current or last trainer (its own lock); it tells the writer when it queues or ends.
  RankSlot rank_;
  // The heal generation the current or last trainer was started in (0: a run's start), with its
  // work dir: a replacement's assignment for the rank that ran here before is not a repeat.
  int64_t rank_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string rank_work_dir_ ABSL_GUARDED_BY(mu_);

  // LogChunks to write (not numbered, not kept across sessions: the coordinator asks again).
  std::deque<v1::AgentMessage> replies_ ABSL_GUARDED_BY(mu_);
  // Answers LogRequests from the rank logs (its own thread; queues on replies_). Last, so that it
  // is destroyed first: its thread calls into rank_ and mu_.
  LogServer log_server_;

  std::thread force_stop_thread_;  // joined by the destructor
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_AGENT_H_
