#include "common/grpc/client_util.h"

#include <string>

#include "absl/strings/str_cat.h"

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
  std::string message = unreachable ? absl::StrCat("cannot reach ", what, ": ", status.error_message())
                                    : absl::StrCat(what, ": ", status.error_message());
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

}  // namespace ringtrain
