// Client-side gRPC helpers: deadlines and Status conversion between gRPC and Abseil.
#ifndef RINGTRAIN_COMMON_GRPC_CLIENT_UTIL_H_
#define RINGTRAIN_COMMON_GRPC_CLIENT_UTIL_H_

#include <chrono>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

// A deadline `timeout` from now, for grpc::ClientContext::set_deadline (every call sets one).
std::chrono::system_clock::time_point DeadlineIn(std::chrono::milliseconds timeout);

// Maps a gRPC status to the Abseil status with the same code. `what` names the call or its target
// and prefixes the message ("<what>: <message>"); when the peer could not be reached (UNAVAILABLE,
// DEADLINE_EXCEEDED) the prefix reads "cannot reach <what>: " instead, e.g.
// "cannot reach coordinator at 127.0.0.1:50051: failed to connect to all addresses".
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what);

// Maps an Abseil status to the gRPC status with the same code and message (for servers).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_GRPC_CLIENT_UTIL_H_
