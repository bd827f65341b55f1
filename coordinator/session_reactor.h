// The server side of one agent's WorkerService.Session stream. Reads: Hello (binds the stream to a
// worker id through Cluster::AttachSession, which checks the worker's credential; a refused Hello
// ends only this stream), then heartbeats and rank messages, each handed to the Cluster as the
// bound worker's (a later Hello naming another id changes nothing); every numbered message is
// answered with an Ack once the Cluster has handled it, carrying the reason when it was refused.
// Writes: the Cluster's assignments and cancels and the acks, queued and written one at a time.
#ifndef RINGTRAIN_COORDINATOR_SESSION_REACTOR_H_
#define RINGTRAIN_COORDINATOR_SESSION_REACTOR_H_

#include <deque>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/cluster.h"
#include "coordinator/coordinator_metrics.h"
#include "ringtrain/v1/worker_service.pb.h"

namespace ringtrain {

class SessionReactor : public grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage>,
                       public AgentChannel {
 public:
  // `cluster` and `rpcs` must outlive the reactor. Deletes itself in OnDone.
  SessionReactor(Cluster* cluster, RpcCounter* rpcs);

  // AgentChannel (called by the Cluster with its lock held).
  void Send(const v1::CoordinatorMessage& message) override;
  void Close(const absl::Status& status) override;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  // Finishes once no write is in flight. Requires mu_.
  void MaybeFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Cluster* const cluster_;
  RpcCounter* const rpcs_;
  v1::AgentMessage in_;    // owned by the read in flight
  std::string worker_id_;  // set by Hello; read and written only by read reactions

  absl::Mutex mu_;
  std::deque<v1::CoordinatorMessage> out_ ABSL_GUARDED_BY(mu_);  // front() is being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_SESSION_REACTOR_H_
