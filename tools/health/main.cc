// ringtrain-health --address HOST:PORT [--tls-ca F]: asks a server's grpc.health.v1.Health/Check
// and exits 0 when it answers SERVING, 1 otherwise (the reason on stderr), 2 on bad flags. Made for
// Kubernetes exec probes: the coordinator serves TLS, which the kubelet's native gRPC probe cannot
// speak. The health service needs no token (coordinator/auth.h).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <future>
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/grpc/client_util.h"
#include "common/grpc/credentials.h"
#include "common/version/version.h"

namespace {

// HealthCheckRequest{service}: field 1, length-delimited (names are far shorter than 128 bytes).
std::string EncodeRequest(const std::string& service) {
  if (service.empty()) return "";
  return std::string("\x0a", 1) + static_cast<char>(service.size()) + service;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringtrain-health: exit 0 when a gRPC server's grpc.health.v1 check says SERVING",
               "ringtrain-health"};
  app.set_version_flag("--version", ringtrain::VersionLine("ringtrain-health"));
  std::string address = "127.0.0.1:50051", tls_ca, service;
  int timeout_ms = 2000;
  if (const char* env = std::getenv("RINGTRAIN_TLS_CA"); env != nullptr) tls_ca = env;
  app.add_option("--address", address, "The server, HOST:PORT")->capture_default_str();
  app.add_option("--tls-ca", tls_ca,
                 "PEM CA of the server's certificate (default $RINGTRAIN_TLS_CA); none: plaintext");
  app.add_option("--service", service, "The service to ask about; empty: the whole server");
  app.add_option("--timeout-ms", timeout_ms, "Deadline of the call")
      ->check(CLI::Range(1, 600000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (service.size() > 127) {
    std::cerr << "ringtrain-health: --service is " << service.size()
              << " bytes; at most 127 are supported" << std::endl;
    return 2;
  }

  absl::StatusOr<ringtrain::ChannelSecurity> security =
      ringtrain::LoadChannelSecurity({tls_ca, "", ""}, "");
  if (!security.ok()) {
    std::cerr << "ringtrain-health: " << security.status().message() << std::endl;
    return 2;
  }
  grpc::GenericStub stub(ringtrain::MakeChannel(address, *security, grpc::ChannelArguments()));
  grpc::ClientContext context;
  context.set_deadline(ringtrain::DeadlineIn(std::chrono::milliseconds(timeout_ms)));
  const std::string bytes = EncodeRequest(service);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status status = done.get_future().get();
  if (!status.ok()) {
    std::cerr << "ringtrain-health: " << address << ": " << status.error_message() << " (code "
              << status.error_code() << ")" << std::endl;
    return 1;
  }
  grpc::Slice answer;
  std::string got;
  if (response.DumpToSingleSlice(&answer).ok()) {
    got.assign(reinterpret_cast<const char*>(answer.begin()), answer.size());
  }
  // HealthCheckResponse{status}: field 1 varint; SERVING is 1.
  if (got != std::string("\x08\x01", 2)) {
    std::cerr << "ringtrain-health: " << address << " is not SERVING (answer of " << got.size()
              << " bytes)" << std::endl;
    return 1;
  }
  std::cout << "SERVING" << std::endl;
  return 0;
}
