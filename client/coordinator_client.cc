#include "client/coordinator_client.h"

#include <algorithm>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc/client_util.h"

namespace ringtrain {
namespace {

// A context for one unary call: a deadline always (STYLE.md), fail-fast unless asked otherwise.
void Configure(grpc::ClientContext* context, const CallOptions& options) {
  context->set_deadline(DeadlineIn(options.timeout));
  context->set_wait_for_ready(options.wait_for_ready);
}

// A connection that broke during the TLS handshake reads as UNAVAILABLE; say what to check.
absl::Status WithTlsHint(const absl::Status& status, bool tls) {
  if (status.code() != absl::StatusCode::kUnavailable) return status;
  const absl::string_view m = status.message();
  const bool handshake = absl::StrContains(m, "andshake") || absl::StrContains(m, "SSL") ||
                         absl::StrContains(m, "ssl") || absl::StrContains(m, "ertificate") ||
                         absl::StrContains(m, "Socket closed") ||
                         absl::StrContains(m, "Connection reset");
  if (!handshake) return status;
  return absl::UnavailableError(absl::StrCat(
      m, tls ? " (TLS failed: is --tls-ca the CA that signed the coordinator's certificate, does "
               "that certificate name this address, and does the coordinator want a client "
               "certificate (--tls-cert/--tls-key)?)"
             : " (if the coordinator serves TLS, give --tls-ca FILE or RINGTRAIN_TLS_CA)"));
}

ChannelSecurity& ProcessSecurity() {
  static ChannelSecurity* const security = new ChannelSecurity();
  return *security;
}

}  // namespace

void SetProcessChannelSecurity(ChannelSecurity security) {
  ProcessSecurity() = std::move(security);
}

const ChannelSecurity& ProcessChannelSecurity() { return ProcessSecurity(); }

JobEventStream::JobEventStream(std::unique_ptr<grpc::ClientContext> context,
                               std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader,
                               std::string what, bool tls)
    : context_(std::move(context)), reader_(std::move(reader)), what_(std::move(what)), tls_(tls) {}

bool JobEventStream::Next(v1::JobEvent* event) { return reader_->Read(event); }

absl::Status JobEventStream::Finish() {
  return WithTlsHint(FromGrpcStatus(reader_->Finish(), what_), tls_);
}

void JobEventStream::Cancel() { context_->TryCancel(); }

CoordinatorClient::CoordinatorClient(std::string address, ChannelSecurity security)
    : address_(std::move(address)),
      what_(absl::StrCat("coordinator at ", address_)),
      tls_(security.tls()) {
  grpc::ChannelArguments args;
  // After a lost connection (a restarted coordinator) try again within a few seconds rather than
  // gRPC's default backoff of up to two minutes: watch retries and `up`'s polls depend on it.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  channel_ = MakeChannel(address_, security, args);
  stub_ = v1::JobService::NewStub(channel_);
}

absl::Status CoordinatorClient::Failed(const grpc::Status& status) const {
  return WithTlsHint(FromGrpcStatus(status, what_), tls_);
}

absl::StatusOr<v1::Job> CoordinatorClient::SubmitJob(const v1::SubmitJobRequest& request,
                                                     const CallOptions& options) {
  grpc::ClientContext context;
  Configure(&context, options);
  v1::Job job;
  const grpc::Status status = stub_->SubmitJob(&context, request, &job);
  if (!status.ok()) return Failed(status);
  return job;
}

absl::StatusOr<v1::Job> CoordinatorClient::GetJob(const std::string& job_id,
                                                  const CallOptions& options) {
  grpc::ClientContext context;
  Configure(&context, options);
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  const grpc::Status status = stub_->GetJob(&context, request, &job);
  if (!status.ok()) return Failed(status);
  return job;
}

absl::StatusOr<std::vector<v1::Job>> CoordinatorClient::ListJobs(const CallOptions& options) {
  // Every page, each call with its own deadline; a token seen twice would loop forever.
  std::vector<v1::Job> jobs;
  v1::ListJobsRequest request;
  std::set<std::string> tokens;
  do {
    grpc::ClientContext context;
    Configure(&context, options);
    v1::ListJobsResponse response;
    const grpc::Status status = stub_->ListJobs(&context, request, &response);
    if (!status.ok()) return Failed(status);
    for (v1::Job& job : *response.mutable_jobs()) jobs.push_back(std::move(job));
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty() && tokens.insert(request.page_token()).second);
  return jobs;
}

absl::StatusOr<v1::Job> CoordinatorClient::CancelJob(const std::string& job_id,
                                                     const CallOptions& options) {
  grpc::ClientContext context;
  Configure(&context, options);
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  const grpc::Status status = stub_->CancelJob(&context, request, &job);
  if (!status.ok()) return Failed(status);
  return job;
}

absl::StatusOr<std::vector<v1::Worker>> CoordinatorClient::ListWorkers(const CallOptions& options) {
  std::vector<v1::Worker> workers;
  v1::ListWorkersRequest request;
  std::set<std::string> tokens;
  do {
    grpc::ClientContext context;
    Configure(&context, options);
    v1::ListWorkersResponse response;
    const grpc::Status status = stub_->ListWorkers(&context, request, &response);
    if (!status.ok()) return Failed(status);
    for (v1::Worker& worker : *response.mutable_workers()) workers.push_back(std::move(worker));
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty() && tokens.insert(request.page_token()).second);
  return workers;
}

std::unique_ptr<JobEventStream> CoordinatorClient::WatchJob(const std::string& job_id,
                                                            int64_t from_step) {
  auto context = std::make_unique<grpc::ClientContext>();
  // No deadline: the stream lasts as long as the job, which may be days. The connection still fails
  // fast when nothing listens because the call is not wait-for-ready; callers GetJob (with a
  // deadline) first so that an unreachable coordinator reads "cannot reach coordinator at ..."
  // instead of hanging.
  context->set_wait_for_ready(false);
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_from_step(from_step);
  auto reader = stub_->WatchJob(context.get(), request);
  return std::make_unique<JobEventStream>(std::move(context), std::move(reader), what_, tls_);
}

absl::StatusOr<std::vector<v1::Worker>> WaitForIdleWorkers(
    CoordinatorClient& client, int count, std::chrono::milliseconds timeout,
    const std::function<absl::Status()>& check, std::chrono::milliseconds poll) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string last;  // what the last poll saw, for the timeout message
  for (;;) {
    if (check) {
      const absl::Status status = check();
      if (!status.ok()) return status;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    CallOptions options;
    options.wait_for_ready = true;  // the coordinator may not be listening yet
    options.timeout =
        std::clamp(left, std::chrono::milliseconds(50), std::chrono::milliseconds(2000));
    absl::StatusOr<std::vector<v1::Worker>> workers = client.ListWorkers(options);
    if (workers.ok()) {
      const auto idle = std::count_if(workers->begin(), workers->end(), [](const v1::Worker& w) {
        return w.state() == v1::WORKER_STATE_IDLE;
      });
      if (idle >= count) return workers;
      last = absl::StrCat(idle, " idle of ", workers->size(), " registered");
    } else {
      last = std::string(workers.status().message());
    }
    if (Clock::now() + poll >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("timed out after ", timeout.count() / 1000.0,
                                                      " s waiting for ", count, " idle worker",
                                                      count == 1 ? "" : "s", " (", last, ")"));
    }
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace ringtrain
