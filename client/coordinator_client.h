// A thin client of the coordinator's JobService for ringctl: one channel, every unary call with a
// deadline, gRPC statuses mapped to Abseil ones whose messages name the coordinator's address
// ("cannot reach coordinator at 127.0.0.1:50051: ..." when nothing answers).
#ifndef RINGTRAIN_CLIENT_COORDINATOR_CLIENT_H_
#define RINGTRAIN_CLIENT_COORDINATOR_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/grpc/credentials.h"
#include "ringtrain/v1/job_service.grpc.pb.h"

namespace ringtrain {

// How one unary call is made.
struct CallOptions {
  // The call's deadline, from when it starts.
  std::chrono::milliseconds timeout{5000};
  // false (the default): fail at once with UNAVAILABLE when the coordinator cannot be connected to,
  // which is what a person at a terminal wants. true: wait for a connection until the deadline
  // (for polls that expect the coordinator to come up, e.g. `ringctl up`).
  bool wait_for_ready = false;
};

// A WatchJob server stream. Not thread-safe except Cancel(), which any thread may call.
class JobEventStream {
 public:
  JobEventStream(std::unique_ptr<grpc::ClientContext> context,
                 std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader, std::string what,
                 bool tls = false);

  // Blocks for the next event; false when the stream has ended (then call Finish once).
  bool Next(v1::JobEvent* event);
  // How the stream ended: OK when the coordinator closed it (the job finished), otherwise the
  // mapped error ("cannot reach coordinator at ..." for a broken connection).
  absl::Status Finish();
  // Ends a blocked Next() from another thread.
  void Cancel();

 private:
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader_;
  std::string what_;
  bool tls_;
};

// The TLS and token every CoordinatorClient of this process uses unless given its own: ringctl's
// main sets them once from --tls-ca/--tls-cert/--tls-key/--token-file (or RINGTRAIN_TLS_CA,
// RINGTRAIN_TLS_CERT, RINGTRAIN_TLS_KEY, RINGTRAIN_TOKEN) after parsing its flags and before any
// client exists (not thread-safe). Default: plaintext, no token.
void SetProcessChannelSecurity(ChannelSecurity security);
const ChannelSecurity& ProcessChannelSecurity();

// Thread-safe (the gRPC stub is); connects lazily, on the first call. Every call carries the
// token of `security`, if any; an unreachable coordinator's error says when TLS may be the cause.
class CoordinatorClient {
 public:
  // `address` is host:port, e.g. "127.0.0.1:50051".
  explicit CoordinatorClient(std::string address,
                             ChannelSecurity security = ProcessChannelSecurity());

  const std::string& address() const { return address_; }

  absl::StatusOr<v1::Job> SubmitJob(const v1::SubmitJobRequest& request,
                                    const CallOptions& options = {});
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id, const CallOptions& options = {});
  // Every job, newest first: follows ListJobs' pages (one call each, each with options.timeout).
  absl::StatusOr<std::vector<v1::Job>> ListJobs(const CallOptions& options = {});
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, const CallOptions& options = {});
  // Every worker, by id: follows ListWorkers' pages like ListJobs.
  absl::StatusOr<std::vector<v1::Worker>> ListWorkers(const CallOptions& options = {});

  // Opens WatchJob from `from_step` (0 = the whole history). The stream has no deadline — a job may
  // run for days — and is not wait-for-ready, so it fails at once when nothing listens; callers
  // make a unary call first (GetJob) to report an unreachable coordinator before streaming.
  std::unique_ptr<JobEventStream> WatchJob(const std::string& job_id, int64_t from_step);

  // For streaming calls made in their own files (client/logs_command.cc): the stub (every call
  // through it carries the channel's token), and a failed call's mapped error (with the TLS hint).
  v1::JobService::Stub& stub() { return *stub_; }
  absl::Status CallFailed(const grpc::Status& status) const { return Failed(status); }

 private:
  // The mapped error of a failed call, with a hint when TLS may be why it failed.
  absl::Status Failed(const grpc::Status& status) const;

  std::string address_;
  std::string what_;  // "coordinator at ADDRESS", for error messages
  bool tls_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

// Polls ListWorkers every `poll` until at least `count` workers are IDLE; returns that listing.
// Waits through an unreachable coordinator (it may be starting). `check`, when set, runs before
// each poll and ends the wait with its error (e.g. "a child process died"). DEADLINE_EXCEEDED after
// `timeout`, saying how many were idle or the last error.
absl::StatusOr<std::vector<v1::Worker>> WaitForIdleWorkers(
    CoordinatorClient& client, int count, std::chrono::milliseconds timeout,
    const std::function<absl::Status()>& check = nullptr,
    std::chrono::milliseconds poll = std::chrono::milliseconds(200));

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_COORDINATOR_CLIENT_H_
