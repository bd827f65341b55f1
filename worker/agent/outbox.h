// What the agent has yet to hear acknowledged by the coordinator: RankStarted, RankReport, RankHung
// and RankExit messages, oldest first, for the session's writer thread (agent.cc) to write once a
// coordinator has welcomed the session. Each message is numbered when queued (AgentMessage.seq:
// 1, 2, 3, … for the life of the agent process) and stays here until the coordinator's Ack for it
// (or a later one: acks are cumulative) arrives, so a message written into a stream that broke
// before the coordinator handled it is written again on the next session (Rewind), and the
// coordinator, which takes each seq of a worker once, applies it once. Nothing is lost with a
// stream, and nothing is applied twice.
//
// Room: a RankReport (a step record) is dropped when the outbox already holds max_buffered
// messages; RankStarted, RankHung and RankExit are never dropped for room, so a job always learns
// how its rank ended.
//
// Epochs: each message belongs to a registration. DropAll(), when the agent gives a registration
// up (a restarted coordinator did not take its rank back), clears the queue and starts a new
// epoch, so messages a rank of the old epoch sends later are dropped too: no one would collect
// them.
//
// Thread-safe. Producers Push from any thread; the writer calls NextToWrite and MarkWritten (one
// consumer); the reader calls Acknowledge; Rewind and DropAll are for between sessions.
#ifndef RINGTRAIN_WORKER_AGENT_OUTBOX_H_
#define RINGTRAIN_WORKER_AGENT_OUTBOX_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>

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

  // Numbers `message` with the next seq and queues it at the back if it belongs to the current
  // epoch, unless it is a RankReport and the outbox is full (counted in dropped_reports(), and
  // logged now and then). Returns whether it was queued.
  bool Push(uint64_t epoch, v1::AgentMessage message);
  // The same in the current epoch.
  bool Push(v1::AgentMessage message);

  // Whether a RankExit is queued (written or not) and not yet acknowledged.
  bool HasRankExit() const;

  // Empties the outbox and starts a new epoch. Returns how many messages were dropped.
  size_t DropAll();

  // A copy of the oldest message not yet written in this session; nullopt when there is none.
  std::optional<v1::AgentMessage> NextToWrite() const;
  // The message with `seq` (from NextToWrite) has been written: the next one is next. By seq, not
  // position, so an Ack that removes it meanwhile cannot make the cursor skip a message.
  void MarkWritten(uint64_t seq);
  // A new session: every message not acknowledged is written again, oldest first.
  void Rewind();
  // The coordinator has handled every message with seq <= `seq`: they are removed. Returns how
  // many were.
  size_t Acknowledge(uint64_t seq);

  // Messages queued and not yet acknowledged, written or not.
  size_t size() const;
  bool empty() const { return size() == 0; }
  // Whether a queued message waits to be written in this session.
  bool HasUnwritten() const;
  // RankReports dropped for room so far.
  uint64_t dropped_reports() const;

 private:
  bool PushLocked(v1::AgentMessage message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_buffered_;

  mutable absl::Mutex mu_;
  std::deque<v1::AgentMessage> messages_ ABSL_GUARDED_BY(mu_);  // by seq, oldest first
  uint64_t written_seq_ ABSL_GUARDED_BY(mu_) = 0;  // written in this session up to this seq
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_reports_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_OUTBOX_H_
