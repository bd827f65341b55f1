// Who may call the coordinator: the bearer-token check every RPC handler of JobService and
// WorkerService runs first, the reactors that refuse a stream before it starts, and the rule that
// keeps an unprotected coordinator off the network. The grpc.health.v1 service is not checked
// (Kubernetes probes carry no credential).
#ifndef RINGTRAIN_COORDINATOR_AUTH_H_
#define RINGTRAIN_COORDINATOR_AUTH_H_

#include <map>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/grpc/client_util.h"
#include "coordinator/coordinator_metrics.h"

namespace ringtrain {

// The tokens one service accepts. Immutable, so thread-safe.
class TokenCheck {
 public:
  // Accepts every call (no token file given).
  static TokenCheck Open() { return TokenCheck({}, "", "", "", ""); }
  // JobService: `tokens` from --client-token-file.
  static TokenCheck ForJobService(std::vector<std::string> tokens);
  // WorkerService: `tokens` from --worker-token-file.
  static TokenCheck ForWorkerService(std::vector<std::string> tokens);

  bool open() const { return tokens_.empty(); }

  // OK when the service is open or the call's `authorization: Bearer <token>` metadata holds one
  // of its tokens (compared in constant time). Otherwise UNAUTHENTICATED saying which credential
  // is missing or wrong and how the caller gives it.
  absl::Status Check(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;
  absl::Status Check(const grpc::CallbackServerContext* context) const {
    return Check(context->client_metadata());
  }

 private:
  TokenCheck(std::vector<std::string> tokens, std::string service, std::string credential,
             std::string how_to_send, std::string server_flag);

  std::vector<std::string> tokens_;
  std::string service_;      // "JobService"
  std::string credential_;   // "client token"
  std::string how_to_send_;  // "ringctl --token-file FILE or RINGTRAIN_TOKEN"
  std::string server_flag_;  // "--client-token-file"
};

// True when `a` equals `b`; the time taken depends on the lengths only, not on where they differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// What the coordinator protects its listening address with.
struct ListenProtection {
  bool tls = false;
  bool client_tokens = false;
  bool worker_tokens = false;
  bool insecure = false;  // --insecure: listen anyway
};

// True for 127.0.0.0/8, [::1] and localhost (with a port, as --listen takes them).
bool IsLoopbackListenAddress(absl::string_view listen);

// OK for a loopback address, a protected one (TLS and both token files) or --insecure; otherwise
// FAILED_PRECONDITION saying what is missing and what to add.
absl::Status CheckListenProtection(absl::string_view listen, const ListenProtection& protection);

// A server-streaming reactor that ends the stream with `status` before any message, counted as
// `method` in `rpcs` (for a call TokenCheck refused). Deletes itself when done.
template <class Response>
grpc::ServerWriteReactor<Response>* RefuseStream(RpcCounter* rpcs, const char* method,
                                                 const absl::Status& status) {
  class Refuse : public grpc::ServerWriteReactor<Response> {
   public:
    explicit Refuse(const absl::Status& s) { this->Finish(ToGrpcStatus(s)); }
    void OnDone() override { delete this; }
  };
  rpcs->CountRpc(method, status.code());
  return new Refuse(status);
}

// The same for a bidirectional stream.
template <class Request, class Response>
grpc::ServerBidiReactor<Request, Response>* RefuseBidiStream(RpcCounter* rpcs, const char* method,
                                                             const absl::Status& status) {
  class Refuse : public grpc::ServerBidiReactor<Request, Response> {
   public:
    explicit Refuse(const absl::Status& s) { this->Finish(ToGrpcStatus(s)); }
    void OnDone() override { delete this; }
  };
  rpcs->CountRpc(method, status.code());
  return new Refuse(status);
}

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_AUTH_H_
