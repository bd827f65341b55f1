// The coordinator's two gRPC services over one Cluster, with the callback API: unary calls finish
// inline (each is a short store transaction), WatchJob is a WatchReactor whose store reads run on
// the service's own thread (replay_loader_), and each agent's Session is a SessionReactor (below)
// that feeds the Cluster and carries its assignments and cancels down.
#ifndef RINGTRAIN_COORDINATOR_SERVICE_H_
#define RINGTRAIN_COORDINATOR_SERVICE_H_

#include "coordinator/auth.h"
#include "coordinator/cluster.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/event_hub.h"
#include "coordinator/job_store.h"
#include "coordinator/serial_executor.h"
#include "ringtrain/v1/job_service.grpc.pb.h"
#include "ringtrain/v1/worker_service.grpc.pb.h"

namespace ringtrain {

// Every pointer must outlive the server the service is registered on, and the JobServiceImpl.
class JobServiceImpl final : public v1::JobService::CallbackService {
 public:
  // `auth` is checked first by every call (auth.h; open by default).
  JobServiceImpl(Cluster* cluster, JobStore* store, EventHub* hub, RpcCounter* rpcs,
                 TokenCheck auth = TokenCheck::Open())
      : cluster_(cluster), store_(store), hub_(hub), rpcs_(rpcs), auth_(std::move(auth)) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const v1::SubmitJobRequest* request, v1::Job* job) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request, v1::Job* job) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const v1::CancelJobRequest* request, v1::Job* job) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext* context,
                                                   const v1::WatchJobRequest* request) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* context,
                                        const v1::ListWorkersRequest* request,
                                        v1::ListWorkersResponse* response) override;
  // A LogsReactor (logs_reactor.h) reading from the worker the job's mesh places the rank on.
  grpc::ServerWriteReactor<v1::StreamLogsResponse>* StreamLogs(
      grpc::CallbackServerContext* context, const v1::StreamLogsRequest* request) override;

 private:
  Cluster* const cluster_;
  JobStore* const store_;
  EventHub* const hub_;
  RpcCounter* const rpcs_;
  const TokenCheck auth_;
  // Reads the WatchJob streams' replay pages off the reaction threads (watch_reactor.h). Last:
  // destroyed first, running the reads still scheduled while the store is alive.
  SerialExecutor replay_loader_;
};

class WorkerServiceImpl final : public v1::WorkerService::CallbackService {
 public:
  // `auth` is checked first by Register and Session (auth.h; open by default).
  WorkerServiceImpl(Cluster* cluster, RpcCounter* rpcs, TokenCheck auth = TokenCheck::Open())
      : cluster_(cluster), rpcs_(rpcs), auth_(std::move(auth)) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage>* Session(
      grpc::CallbackServerContext* context) override;

 private:
  Cluster* const cluster_;
  RpcCounter* const rpcs_;
  const TokenCheck auth_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_SERVICE_H_
