// The server side of JobService.StreamLogs: one reactor per client, relaying one rank's log from
// the worker that ran it. It pulls: a LogRequest goes down the worker's Session (Cluster::
// SendToWorker), the agent answers with one LogChunk (routed back by the LogRouter), the chunk's
// lines are written to the client, and only once that write is done does the next request go, so
// a slow client holds at most one chunk here and nothing piles up on the worker's session. Ends
// with OK at the end of the log (with `follow`: once the rank no longer runs there), with the
// agent's error (NOT_FOUND: no such log there, e.g. pruned) prefixed with the worker, or with
// UNAVAILABLE naming the worker when it cannot be reached.
#ifndef RINGTRAIN_COORDINATOR_LOGS_REACTOR_H_
#define RINGTRAIN_COORDINATOR_LOGS_REACTOR_H_

#include <cstdint>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/cluster.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/log_router.h"
#include "ringtrain/v1/job_service.pb.h"
#include "ringtrain/v1/worker_service.pb.h"

namespace ringtrain {

class LogsReactor : public grpc::ServerWriteReactor<v1::StreamLogsResponse>, public LogSink {
 public:
  // `cluster`, `router` and `rpcs` must outlive the reactor. Sends the first request to
  // `worker_id` at once. Deletes itself in OnDone.
  LogsReactor(Cluster* cluster, LogRouter* router, RpcCounter* rpcs, std::string worker_id,
              const v1::StreamLogsRequest& request);

  // LogSink (the router's lock held).
  bool OnLogChunk(const v1::LogChunk& chunk) override;
  void OnLogFailed(const absl::Status& status) override;

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Sends next_ to the worker; finishes with the error when it cannot be reached. Call without
  // mu_ held.
  void SendRequest();
  // Finishes once no write is in flight.
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Cluster* const cluster_;
  LogRouter* const router_;
  RpcCounter* const rpcs_;
  const std::string worker_id_;
  const uint64_t request_id_;

  absl::Mutex mu_;
  v1::LogRequest next_ ABSL_GUARDED_BY(mu_);
  v1::StreamLogsResponse out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool end_ ABSL_GUARDED_BY(mu_) = false;  // the chunk being written was the last
  std::optional<grpc::Status> pending_finish_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_LOGS_REACTOR_H_
