// What the agent has yet to tell the coordinator: RankStarted, RankReport and RankExit messages,
// oldest first, for the session's writer thread (agent.cc) to write once a coordinator has welcomed
// the session. The outbox outlives sessions, so while the stream is down messages wait here: a
// RankReport (a step record) is dropped when the outbox already holds max_buffered messages;
// RankStarted and RankExit are never dropped for room, so a job always learns how its rank ended.
//
// Epochs: each message belongs to a registration. DropAll(), when the agent gives a registration
// up (a restarted coordinator did not take its rank back), clears the queue and starts a new
// epoch, so messages a rank of the old epoch sends later are dropped too: no one would collect
// them.
//
// Thread-safe. Front() and PopFront() are for one consumer (the writer), which pops what it has
// written: PushFront() and DropAll() change the front, so they are for when no consumer holds a
// copy of it (between sessions).
#ifndef RINGTRAIN_WORKER_AGENT_OUTBOX_H_
#define RINGTRAIN_WORKER_AGENT_OUTBOX_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "ringtrain/v1/worker_service.pb.h"

namespace ringtrain {

class Outbox {
 public:
  explicit Outbox(size_t max_buffered) : max_buffered_(max_buffered) {}

  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // The current epoch (0 at first; DropAll() moves it on).
  uint64_t epoch() const;

  // Queues `message` at the back if it belongs to the current epoch, unless it is a RankReport
  // and the outbox is full (counted in dropped_reports(), and logged now and then). Returns
  // whether it was queued.
  bool Push(uint64_t epoch, v1::AgentMessage message);
  // The same in the current epoch.
  bool Push(v1::AgentMessage message);

  // Queues `messages`, in their order, ahead of everything queued, whatever the bound (step
  // records re-sent after a coordinator restart go before anything newer).
  void PushFront(std::vector<v1::AgentMessage> messages);

  // Whether a RankExit is queued.
  bool HasRankExit() const;

  // Empties the outbox and starts a new epoch. Returns how many messages were dropped.
  size_t DropAll();

  // A copy of the oldest message; nullopt when empty.
  std::optional<v1::AgentMessage> Front() const;
  // Removes the oldest message (once it has been written). No-op when empty.
  void PopFront();

  size_t size() const;
  bool empty() const { return size() == 0; }
  // RankReports dropped for room so far.
  uint64_t dropped_reports() const;

 private:
  bool PushLocked(v1::AgentMessage message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_buffered_;

  mutable absl::Mutex mu_;
  std::deque<v1::AgentMessage> messages_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_reports_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_OUTBOX_H_
