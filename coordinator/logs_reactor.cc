#include "coordinator/logs_reactor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/grpc/client_util.h"
#include "common/printable.h"

namespace ringtrain {

LogsReactor::LogsReactor(Cluster* cluster, LogRouter* router, RpcCounter* rpcs,
                         std::string worker_id, const v1::StreamLogsRequest& request)
    : cluster_(cluster),
      router_(router),
      rpcs_(rpcs),
      worker_id_(std::move(worker_id)),
      request_id_(router->Add(worker_id_, this)) {
  {
    absl::MutexLock lock(&mu_);
    next_.set_request_id(request_id_);
    next_.set_job_id(request.job_id());
    next_.set_rank(request.rank());
    next_.set_offset(request.from_offset() > 0 ? request.from_offset() : -1);
    next_.set_tail_lines(request.tail_lines());
    next_.set_follow(request.follow());
    out_.set_worker_id(worker_id_);
  }
  SendRequest();
}

void LogsReactor::SendRequest() {
  v1::CoordinatorMessage message;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    *message.mutable_log_request() = next_;
  }
  router_->Awaiting(request_id_, absl::Now());
  const absl::Status sent = cluster_->SendToWorker(worker_id_, message);
  if (!sent.ok()) {
    absl::MutexLock lock(&mu_);
    FinishLocked(ToGrpcStatus(sent));
  }
}

bool LogsReactor::OnLogChunk(const v1::LogChunk& chunk) {
  absl::MutexLock lock(&mu_);
  if (finished_ || writing_) return false;  // no chunk is asked for while a write is in flight
  if (chunk.error_code() != 0) {
    FinishLocked(ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(chunk.error_code()),
                                           absl::StrCat(worker_id_, ": ", chunk.error()))));
    return false;
  }
  next_.set_offset(chunk.next_offset());
  end_ = chunk.end();
  if (chunk.lines_size() == 0) {
    if (end_) {
      FinishLocked(grpc::Status::OK);
      return false;
    }
    // A follow keep-alive: ask again (the router's lock is held, so straight to the Cluster).
    v1::CoordinatorMessage message;
    *message.mutable_log_request() = next_;
    if (absl::Status sent = cluster_->SendToWorker(worker_id_, message); !sent.ok()) {
      FinishLocked(ToGrpcStatus(sent));
      return false;
    }
    return true;
  }
  out_.clear_lines();
  for (const v1::AgentLogLine& line : chunk.lines()) {
    v1::LogLine* out = out_.add_lines();
    const absl::Time time = absl::FromUnixMicros(line.time_unix_micros());
    out->mutable_time()->set_seconds(absl::ToUnixSeconds(time));
    out->mutable_time()->set_nanos(
        static_cast<int32_t>((line.time_unix_micros() % 1000000 + 1000000) % 1000000 * 1000));
    out->set_stream(ValidUtf8(line.stream()));
    out->set_text(ValidUtf8(line.text()));
    out->set_offset(line.offset());
  }
  out_.set_next_offset(chunk.next_offset());
  writing_ = true;
  StartWrite(&out_);
  return false;
}

void LogsReactor::OnLogFailed(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  FinishLocked(ToGrpcStatus(status));
}

void LogsReactor::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (pending_finish_) {
      FinishLocked(*pending_finish_);
      return;
    }
    if (!ok) {  // the client went away
      FinishLocked(grpc::Status::CANCELLED);
      return;
    }
    if (end_) {
      FinishLocked(grpc::Status::OK);
      return;
    }
  }
  SendRequest();
}

void LogsReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  FinishLocked(grpc::Status::CANCELLED);
}

void LogsReactor::FinishLocked(const grpc::Status& status) {
  if (finished_) return;
  if (writing_) {
    if (!pending_finish_) pending_finish_ = status;
    return;
  }
  finished_ = true;
  rpcs_->CountRpc("StreamLogs", static_cast<absl::StatusCode>(status.error_code()));
  Finish(status);
}

void LogsReactor::OnDone() {
  router_->Remove(request_id_);
  delete this;
}

}  // namespace ringtrain
