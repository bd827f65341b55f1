// The session's writer (Agent::WriterLoop): the one thread that writes to the stream after Hello —
// heartbeats on time, then, once the coordinator has sent Welcome, the outbox (numbered, kept until
// acknowledged) and the replies (LogChunks, StepRecords), and at shutdown the close of our side.
// (Opening the session and reading it: agent_session.cc.)
#include "worker/agent/agent.h"

#include <optional>
#include <utility>

#include "absl/time/time.h"

namespace ringtrain {
namespace {

constexpr absl::Duration kCloseWait = absl::Seconds(1);  // for the coordinator to end the stream

}  // namespace

bool Agent::WriterHasWork() const {
  return session_over_ || (welcomed_ && (outbox_.HasUnwritten() || !replies_.empty())) ||
         (stop_requested_ && !rank_.active());
}

void Agent::AwaitWriterWork(Clock::time_point deadline) {
  for (;;) {
    writer_wakeup_ = false;  // before looking, so a change after the look wakes the wait below
    if (WriterHasWork() || Clock::now() >= deadline) return;
    mu_.AwaitWithTimeout(absl::Condition(&writer_wakeup_),
                         absl::FromChrono(deadline - Clock::now()));
  }
}

void Agent::WakeWriter() {
  absl::MutexLock lock(&mu_);
  writer_wakeup_ = true;
}

void Agent::WriterLoop(Stream* stream, grpc::ClientContext* context,
                       std::chrono::milliseconds interval) {
  Clock::time_point next_heartbeat = Clock::now();  // the first one right after Hello
  for (;;) {
    v1::AgentMessage message;
    bool from_outbox = false;
    bool close = false;
    {
      absl::MutexLock lock(&mu_);
      AwaitWriterWork(next_heartbeat);
      const Clock::time_point now = Clock::now();
      if (session_over_) break;
      // Whether the rank has ended is read before the outbox: a rank's RankExit is queued before
      // it counts as ended, so an ended rank's exit is found below rather than left behind.
      const bool may_close = stop_requested_ && (!rank_.active() || now >= stop_deadline_);
      std::optional<v1::AgentMessage> queued;
      if (now >= next_heartbeat) {
        message.mutable_heartbeat();
        next_heartbeat = now + interval;
      } else if (welcomed_ && (queued = outbox_.NextToWrite())) {
        message = *std::move(queued);
        from_outbox = true;
      } else if (welcomed_ && !replies_.empty()) {
        message = std::move(replies_.front());
        replies_.pop_front();
      } else if (may_close) {
        close = true;
      } else {
        continue;
      }
    }
    if (close) {
      // Everything the coordinator should hear has been written: close our side and give the
      // coordinator a moment to end the stream (so it reads all of it), then cancel the call.
      stream->WritesDone();
      absl::MutexLock lock(&mu_);
      if (!mu_.AwaitWithTimeout(absl::Condition(&session_over_), kCloseWait)) context->TryCancel();
      writer_running_ = false;
      return;
    }
    if (!stream->Write(message)) break;  // the call is over; the reader sees it too
    if (message.has_heartbeat()) metrics_->HeartbeatSent();
    if (from_outbox) outbox_.MarkWritten(message.seq());  // kept until its Ack comes back
  }
  absl::MutexLock lock(&mu_);
  writer_running_ = false;
}

void Agent::QueueLocked(v1::AgentMessage message) {
  outbox_.Push(std::move(message));
  writer_wakeup_ = true;
}

}  // namespace ringtrain
