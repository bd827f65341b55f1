// One WorkerService.Session (Agent::RunSession): Hello, then the reader — each CoordinatorMessage
// taken in turn (Welcome and Acks here; assignments, cancels and step-record requests in
// agent_ranks.cc; log requests handed to the LogServer) — while the writer (agent_writer.cc) runs
// on a second thread; then the writer stopped and the call finished. (Registering and reopening
// sessions: agent.cc.)
#include "worker/agent/agent.h"

#include <memory>
#include <thread>

#include "absl/time/time.h"
#include "common/log.h"

namespace ringtrain {
namespace {

constexpr absl::Duration kWriterStopWait = absl::Seconds(2);  // then the call is cancelled

}  // namespace

grpc::Status Agent::RunSession(bool* opened) {
  // No deadline: the session lasts as long as the agent. It ends when the coordinator ends it, when
  // the connection fails, or at Shutdown (the writer closes our side; ForceStopLoop cancels it).
  grpc::ClientContext context;
  v1::AgentMessage hello;
  std::chrono::milliseconds interval;
  {
    absl::MutexLock lock(&mu_);
    if (stop_requested_) return grpc::Status(grpc::StatusCode::CANCELLED, "shutting down");
    call_context_ = &context;
    session_over_ = false;
    welcomed_ = false;
    outbox_.Rewind();  // what the last session wrote but never saw acknowledged goes again
    replies_.clear();  // the streams they answer ended with the last session
    hello.mutable_hello()->set_worker_id(worker_id_);
    hello.mutable_hello()->set_credential(credential_);
    interval = heartbeat_interval_;
  }
  std::unique_ptr<Stream> stream = stub_->Session(&context);
  if (stream->Write(hello)) {
    *opened = true;
    metrics_->SetConnected(true);
    std::thread writer;
    {
      absl::MutexLock lock(&mu_);
      RT_LOG(Info) << "session open with coordinator at " << options_.coordinator << " as worker "
                   << worker_id_ << " (" << outbox_.size()
                   << " messages to send that the coordinator has not acknowledged)";
      writer_running_ = true;
      writer = std::thread([&] { WriterLoop(stream.get(), &context, interval); });
    }
    v1::CoordinatorMessage message;
    while (stream->Read(&message)) {
      if (message.has_welcome()) {
        absl::MutexLock lock(&mu_);
        welcomed_ = true;  // the coordinator took the Hello: the outbox may go now
        writer_wakeup_ = true;
      } else if (message.has_ack()) {
        outbox_.Acknowledge(message.ack().seq());
        if (!message.ack().refused().empty()) {
          RT_LOG(Warning) << "the coordinator refused message " << message.ack().seq() << ": "
                          << message.ack().refused() << " (dropped)";
        }
      } else if (message.has_assignment()) {
        HandleAssignment(message.assignment());
      } else if (message.has_cancel()) {
        HandleCancel(message.cancel());
      } else if (message.has_heal()) {
        HandleHeal(message.heal());
      } else if (message.has_log_request()) {
        log_server_.Handle(message.log_request());
      } else if (message.has_step_records_request()) {
        HandleStepRecordsRequest(message.step_records_request());
      } else {
        RT_LOG(Warning) << "ignoring a message of unknown kind from the coordinator";
      }
    }
    {
      absl::MutexLock lock(&mu_);
      session_over_ = true;
      writer_wakeup_ = true;
      // A Write stuck on flow control never returns by itself: cancelling the call fails it.
      if (!mu_.AwaitWithTimeout(absl::Condition(this, &Agent::WriterStopped), kWriterStopWait)) {
        context.TryCancel();
      }
    }
    writer.join();
    metrics_->SetConnected(false);
  }
  const grpc::Status status = stream->Finish();
  absl::MutexLock lock(&mu_);
  call_context_ = nullptr;
  return status;
}

}  // namespace ringtrain
