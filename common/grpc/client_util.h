// Client-side gRPC helpers: deadlines and Status conversion between gRPC and Abseil.
#ifndef RINGTRAIN_COMMON_GRPC_CLIENT_UTIL_H_
#define RINGTRAIN_COMMON_GRPC_CLIENT_UTIL_H_

#include <chrono>
#include <cstddef>
#include <string>

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

// The most bytes a status message may take in gRPC's grpc-message trailer, where it travels
// percent-encoded (a byte outside printable ASCII, or '%', takes three). A client refuses trailers
// over its metadata limit (16 KiB in this gRPC, a soft 8 KiB in later ones) and reports
// RESOURCE_EXHAUSTED instead of the error; 6 KiB leaves room for the other trailers.
inline constexpr size_t kMaxStatusMessageWireBytes = 6 * 1024;

// `message` when it encodes in at most `max_wire_bytes`; else its longest prefix of whole UTF-8
// characters that does, with a note of the full length ("… (cut: the message is N bytes)").
// `max_wire_bytes` must leave room for the note (>= 64).
std::string CapStatusMessage(absl::string_view message,
                             size_t max_wire_bytes = kMaxStatusMessageWireBytes);

// Maps an Abseil status to the gRPC status with the same code and message (for servers). The
// message is capped (CapStatusMessage): the last guard that a value echoed in an error, however
// large, still reaches the client as that error.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_GRPC_CLIENT_UTIL_H_
