#include "coordinator/session_reactor.h"

#include "common/grpc/client_util.h"
#include "common/log.h"

namespace ringtrain {

SessionReactor::SessionReactor(Cluster* cluster, RpcCounter* rpcs)
    : cluster_(cluster), rpcs_(rpcs) {
  StartRead(&in_);
}

void SessionReactor::Send(const v1::CoordinatorMessage& message) {
  absl::MutexLock lock(&mu_);
  if (finish_status_) return;
  out_.push_back(message);
  if (!writing_) {
    writing_ = true;
    StartWrite(&out_.front());
  }
}

void SessionReactor::Close(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!finish_status_) finish_status_ = ToGrpcStatus(status);
  MaybeFinish();
}

void SessionReactor::MaybeFinish() {
  if (finished_ || !finish_status_ || writing_) return;
  finished_ = true;
  rpcs_->CountRpc("Session", static_cast<absl::StatusCode>(finish_status_->error_code()));
  Finish(*finish_status_);
}

void SessionReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The agent closed its side or the connection broke.
    if (!worker_id_.empty()) {
      cluster_->DetachSession(worker_id_, this);
      cluster_->log_router()->SessionEnded(worker_id_);
    }
    Close(absl::OkStatus());
    return;
  }
  if (worker_id_.empty()) {
    if (!in_.has_hello() || in_.hello().worker_id().empty()) {
      Close(absl::InvalidArgumentError(
          "the first message of a Session must be Hello{worker_id, credential}"));
      return;
    }
    absl::Status attached =
        cluster_->AttachSession(in_.hello().worker_id(), in_.hello().credential(), this);
    if (!attached.ok()) {
      Close(attached);
      return;
    }
    worker_id_ = in_.hello().worker_id();
  } else if (in_.has_log_chunk()) {
    // An answer for a StreamLogs stream (not numbered, not acknowledged).
    cluster_->log_router()->Deliver(worker_id_, in_.log_chunk());
  } else {
    const std::string refused = cluster_->OnAgentMessage(worker_id_, in_);
    // Acknowledged once handled (stored), refused or not: the agent may forget it now.
    if (in_.seq() != 0) {
      v1::CoordinatorMessage ack;
      ack.mutable_ack()->set_seq(in_.seq());
      ack.mutable_ack()->set_refused(refused);
      Send(ack);
    }
  }
  StartRead(&in_);
}

void SessionReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  out_.pop_front();
  writing_ = false;
  if (!ok) {
    // The stream is broken; OnReadDone(false) detaches the worker.
    out_.clear();
    if (!finish_status_) finish_status_ = grpc::Status::OK;
  } else if (!out_.empty()) {
    writing_ = true;
    StartWrite(&out_.front());
    return;
  }
  MaybeFinish();
}

void SessionReactor::OnDone() {
  if (!worker_id_.empty()) {
    cluster_->DetachSession(worker_id_, this);
    cluster_->log_router()->SessionEnded(worker_id_);
  }
  delete this;
}

}  // namespace ringtrain
