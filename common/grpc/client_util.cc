#include "common/grpc/client_util.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/printable.h"

namespace ringtrain {

std::chrono::system_clock::time_point DeadlineIn(std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

// grpc::StatusCode and absl::StatusCode share the canonical numbering (0..16), so codes map 1:1.
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const grpc::StatusCode code = status.error_code();
  const bool unreachable =
      code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
  std::string message = unreachable
                            ? absl::StrCat("cannot reach ", what, ": ", status.error_message())
                            : absl::StrCat(what, ": ", status.error_message());
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

namespace {

// What one byte of a status message takes in the grpc-message trailer (percent-encoded).
size_t WireBytes(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x20 && u <= 0x7e && u != '%' ? 1 : 3;
}

size_t WireBytes(absl::string_view text) {
  size_t n = 0;
  for (const char c : text) n += WireBytes(c);
  return n;
}

}  // namespace

std::string CapStatusMessage(absl::string_view message, size_t max_wire_bytes) {
  if (WireBytes(message) <= max_wire_bytes) return std::string(message);
  const std::string note =
      absl::StrCat(" \xe2\x80\xa6 (cut: the message is ", message.size(), " bytes)");
  const size_t budget = max_wire_bytes - std::min(max_wire_bytes, WireBytes(note));
  size_t end = 0;
  for (size_t used = 0; end < message.size() && used + WireBytes(message[end]) <= budget; ++end) {
    used += WireBytes(message[end]);
  }
  return absl::StrCat(Utf8Prefix(message, end), note);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      CapStatusMessage(status.message()));
}

}  // namespace ringtrain
