#include "coordinator/auth.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/grpc/credentials.h"

namespace ringtrain {

TokenCheck TokenCheck::ForJobService(std::vector<std::string> tokens) {
  return TokenCheck(std::move(tokens), "JobService", "client token",
                    "ringctl --token-file FILE or RINGTRAIN_TOKEN", "--client-token-file");
}

TokenCheck TokenCheck::ForWorkerService(std::vector<std::string> tokens) {
  return TokenCheck(std::move(tokens), "WorkerService", "join token",
                    "ringtrain-worker --join-token-file FILE", "--worker-token-file");
}

TokenCheck::TokenCheck(std::vector<std::string> tokens, std::string service, std::string credential,
                       std::string how_to_send, std::string server_flag)
    : tokens_(std::move(tokens)),
      service_(std::move(service)),
      credential_(std::move(credential)),
      how_to_send_(std::move(how_to_send)),
      server_flag_(std::move(server_flag)) {}

absl::Status TokenCheck::Check(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  if (open()) return absl::OkStatus();
  const auto it = metadata.find(kAuthorizationKey);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        absl::StrCat(service_, " needs a ", credential_, ": ", how_to_send_));
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, kBearerPrefix)) {
    return absl::UnauthenticatedError(absl::StrCat(service_, " needs a ", credential_,
                                                   " as 'authorization: Bearer <token>' "
                                                   "metadata (",
                                                   how_to_send_, ")"));
  }
  bool match = false;
  // Every token is compared, with no early exit.
  for (const std::string& token : tokens_) match |= ConstantTimeEquals(value, token);
  if (!match) {
    return absl::UnauthenticatedError(absl::StrCat(
        service_, " refused the ", credential_, ": it is not one of the coordinator's ",
        server_flag_, " tokens (check ", how_to_send_, ")"));
  }
  return absl::OkStatus();
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | (x ^ y);
  }
  return diff == 0;
}

bool IsLoopbackListenAddress(absl::string_view listen) {
  // The same rule as a client's (a token in cleartext only to loopback): HOST:PORT, [V6]:PORT,
  // localhost, or a unix: address, which is never reachable from the network.
  return IsLoopbackTarget(listen);
}

absl::Status CheckListenProtection(absl::string_view listen, const ListenProtection& protection) {
  if (protection.insecure || IsLoopbackListenAddress(listen)) return absl::OkStatus();
  std::string missing;
  const auto add = [&missing](absl::string_view what) {
    absl::StrAppend(&missing, missing.empty() ? "" : ", ", what);
  };
  if (!protection.tls) add("TLS (--tls-cert FILE --tls-key FILE)");
  if (!protection.client_tokens) add("client tokens (--client-token-file FILE)");
  if (!protection.worker_tokens) add("join tokens (--worker-token-file FILE)");
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to listen on ", listen, ", which is not a loopback address, without ", missing,
      ": anyone who reaches it could submit jobs or pose as a worker. Add them, listen on "
      "127.0.0.1, or pass --insecure to serve unprotected anyway"));
}

}  // namespace ringtrain
