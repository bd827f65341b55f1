#include "coordinator/service.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "common/grpc/client_util.h"
#include "coordinator/job_checkpoints.h"
#include "coordinator/logs_reactor.h"
#include "coordinator/paging.h"
#include "coordinator/proto_convert.h"
#include "coordinator/session_reactor.h"
#include "coordinator/watch_reactor.h"

namespace ringtrain {
namespace {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context, RpcCounter* rpcs,
                                    const char* method, const absl::Status& status) {
  rpcs->CountRpc(method, status.code());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Status CheckJobId(const std::string& job_id) {
  if (job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  return absl::OkStatus();
}

}  // namespace

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(grpc::CallbackServerContext* context,
                                                    const v1::SubmitJobRequest* request,
                                                    v1::Job* job) {
  if (absl::Status a = auth_.Check(context); !a.ok()) {
    return FinishNow(context, rpcs_, "SubmitJob", a);
  }
  absl::StatusOr<JobRecord> record = cluster_->Submit(*request);
  if (record.ok()) *job = ToProto(*record);
  return FinishNow(context, rpcs_, "SubmitJob", record.status());
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                 const v1::GetJobRequest* request, v1::Job* job) {
  if (absl::Status a = auth_.Check(context); !a.ok()) {
    return FinishNow(context, rpcs_, "GetJob", a);
  }
  if (absl::Status s = CheckJobId(request->job_id()); !s.ok()) {
    return FinishNow(context, rpcs_, "GetJob", s);
  }
  absl::StatusOr<JobRecord> record = store_->GetJob(request->job_id());
  if (!record.ok()) return FinishNow(context, rpcs_, "GetJob", record.status());
  *job = ToProto(*record);
  absl::StatusOr<std::vector<ListedCheckpoint>> checkpoints = JobCheckpoints(*store_, *record);
  if (!checkpoints.ok()) return FinishNow(context, rpcs_, "GetJob", checkpoints.status());
  for (const ListedCheckpoint& c : *checkpoints) {
    v1::Checkpoint* out = job->add_checkpoints();
    out->set_step(c.step);
    out->set_complete(c.complete);
    out->set_path(c.path);
  }
  return FinishNow(context, rpcs_, "GetJob", absl::OkStatus());
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                   const v1::ListJobsRequest* request,
                                                   v1::ListJobsResponse* response) {
  if (absl::Status a = auth_.Check(context); !a.ok()) {
    return FinishNow(context, rpcs_, "ListJobs", a);
  }
  // Newest first, paged (paging.h): one more row than the page can hold says whether one follows.
  absl::StatusOr<int> page_size = PageSize(request->page_size());
  if (!page_size.ok()) return FinishNow(context, rpcs_, "ListJobs", page_size.status());
  absl::StatusOr<std::string> before = PageTokenId("jobs", request->page_token());
  if (!before.ok()) return FinishNow(context, rpcs_, "ListJobs", before.status());
  absl::StatusOr<std::vector<JobRecord>> jobs =
      store_->ListJobsNewestFirst(*before, *page_size + 1);
  if (absl::IsNotFound(jobs.status())) {
    jobs = absl::InvalidArgumentError(
        absl::StrCat("page_token names no job: ", jobs.status().message()));
  }
  if (!jobs.ok()) return FinishNow(context, rpcs_, "ListJobs", jobs.status());
  std::vector<v1::Job> protos;
  for (const JobRecord& job : *jobs) protos.push_back(ToProto(job));
  const size_t n = PageLength(protos, static_cast<size_t>(*page_size));
  for (size_t i = 0; i < n; ++i) *response->add_jobs() = std::move(protos[i]);
  if (n < protos.size())
    response->set_next_page_token(NextPageToken("jobs", (*jobs)[n - 1].job_id));
  return FinishNow(context, rpcs_, "ListJobs", absl::OkStatus());
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                    const v1::CancelJobRequest* request,
                                                    v1::Job* job) {
  if (absl::Status a = auth_.Check(context); !a.ok()) {
    return FinishNow(context, rpcs_, "CancelJob", a);
  }
  if (absl::Status s = CheckJobId(request->job_id()); !s.ok()) {
    return FinishNow(context, rpcs_, "CancelJob", s);
  }
  absl::StatusOr<JobRecord> record = cluster_->Cancel(request->job_id());
  if (record.ok()) *job = ToProto(*record);
  return FinishNow(context, rpcs_, "CancelJob", record.status());
}

grpc::ServerWriteReactor<v1::JobEvent>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) {
  if (absl::Status a = auth_.Check(context); !a.ok()) {
    return RefuseStream<v1::JobEvent>(rpcs_, "WatchJob", a);
  }
  absl::Status status = CheckJobId(request->job_id());
  if (status.ok() && request->from_step() < 0) {
    status = absl::InvalidArgumentError("from_step must be >= 0");
  }
  if (status.ok()) status = store_->GetJob(request->job_id()).status();
  if (!status.ok()) {
    // A reactor that only finishes: the stream ends with the error before any event.
    class Refuse : public grpc::ServerWriteReactor<v1::JobEvent> {
     public:
      explicit Refuse(const absl::Status& s) { Finish(ToGrpcStatus(s)); }
      void OnDone() override { delete this; }
    };
    rpcs_->CountRpc("WatchJob", status.code());
    return new Refuse(status);
  }
  return new WatchReactor(store_, hub_, rpcs_, &replay_loader_, request->job_id(),
                          request->from_step());
}

grpc::ServerUnaryReactor* JobServiceImpl::ListWorkers(grpc::CallbackServerContext* context,
                                                      const v1::ListWorkersRequest* request,
                                                      v1::ListWorkersResponse* response) {
  if (absl::Status a = auth_.Check(context); !a.ok()) {
    return FinishNow(context, rpcs_, "ListWorkers", a);
  }
  // By worker id, paged (paging.h): the page starts after the previous page's last id.
  absl::StatusOr<int> page_size = PageSize(request->page_size());
  if (!page_size.ok()) return FinishNow(context, rpcs_, "ListWorkers", page_size.status());
  absl::StatusOr<std::string> after = PageTokenId("workers", request->page_token());
  if (!after.ok()) return FinishNow(context, rpcs_, "ListWorkers", after.status());
  std::vector<v1::Worker> workers = cluster_->ListWorkers();
  std::sort(workers.begin(), workers.end(),
            [](const v1::Worker& a, const v1::Worker& b) { return a.worker_id() < b.worker_id(); });
  const auto first = std::upper_bound(
      workers.begin(), workers.end(), *after,
      [](const std::string& id, const v1::Worker& w) { return id < w.worker_id(); });
  workers.erase(workers.begin(), after->empty() ? workers.begin() : first);
  const size_t n = PageLength(workers, static_cast<size_t>(*page_size));
  if (n < workers.size())
    response->set_next_page_token(NextPageToken("workers", workers[n - 1].worker_id()));
  for (size_t i = 0; i < n; ++i) *response->add_workers() = std::move(workers[i]);
  return FinishNow(context, rpcs_, "ListWorkers", absl::OkStatus());
}

grpc::ServerWriteReactor<v1::StreamLogsResponse>* JobServiceImpl::StreamLogs(
    grpc::CallbackServerContext* context, const v1::StreamLogsRequest* request) {
  if (absl::Status a = auth_.Check(context); !a.ok()) {
    return RefuseStream<v1::StreamLogsResponse>(rpcs_, "StreamLogs", a);
  }
  absl::Status status = CheckJobId(request->job_id());
  if (status.ok() &&
      (request->rank() < 0 || request->tail_lines() < 0 || request->from_offset() < 0)) {
    status = absl::InvalidArgumentError("rank, tail_lines and from_offset must be >= 0");
  }
  std::string worker_id;
  if (status.ok()) {
    absl::StatusOr<JobRecord> job = store_->GetJob(request->job_id());
    status = job.status();
    if (status.ok() && request->rank() >= job->degrees.world) {
      status = absl::InvalidArgumentError(absl::StrCat(request->job_id(), " has ranks 0..",
                                                       job->degrees.world - 1,
                                                       "; there is no rank ", request->rank()));
    }
    if (status.ok()) {
      for (const RankPlacement& placement : job->mesh) {
        if (placement.rank == request->rank()) worker_id = placement.worker_id;
      }
      if (worker_id.empty()) {
        status = absl::FailedPreconditionError(absl::StrCat(
            request->job_id(), " is ", JobStateName(job->state), " and its rank ", request->rank(),
            " has not been placed on a worker, so it has no "
            "log yet: try again once it is ASSIGNED"));
      }
    }
  }
  if (!status.ok()) return RefuseStream<v1::StreamLogsResponse>(rpcs_, "StreamLogs", status);
  return new LogsReactor(cluster_, cluster_->log_router(), rpcs_, worker_id, *request);
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Register(grpc::CallbackServerContext* context,
                                                      const v1::RegisterRequest* request,
                                                      v1::RegisterResponse* response) {
  if (absl::Status a = auth_.Check(context); !a.ok()) {
    return FinishNow(context, rpcs_, "Register", a);
  }
  absl::StatusOr<v1::RegisterResponse> registered = cluster_->Register(*request);
  if (registered.ok()) *response = *registered;
  return FinishNow(context, rpcs_, "Register", registered.status());
}

grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage>* WorkerServiceImpl::Session(
    grpc::CallbackServerContext* context) {
  if (absl::Status a = auth_.Check(context); !a.ok()) {
    return RefuseBidiStream<v1::AgentMessage, v1::CoordinatorMessage>(rpcs_, "Session", a);
  }
  return new SessionReactor(cluster_, rpcs_);
}

}  // namespace ringtrain
