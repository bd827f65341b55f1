// Where a client's bearer token may travel (common/grpc/credentials.h): which gRPC targets are
// loopback, the refusal and the warning, and MakeChannel leaving a refused token off the wire.
#include "common/grpc/credentials.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "ringtrain/v1/job_service.grpc.pb.h"

namespace ringtrain {
namespace {

TEST(IsLoopbackTargetTest, LoopbackHostsSchemesAndSockets) {
  for (const char* target :
       {"127.0.0.1:50051", "127.255.3.4:1", "127.0.0.1", "localhost:50051", "LocalHost",
        "[::1]:50051", "[::1]", "::1", "dns:localhost:1", "dns:///127.0.0.1:50051",
        "dns://8.8.8.8/localhost:1", "ipv4:127.0.0.1:1,127.0.0.2:2", "ipv6:[::1]:1",
        "unix:/tmp/ringtrain.sock", "unix:///tmp/ringtrain.sock", "unix-abstract:ringtrain"}) {
    EXPECT_TRUE(IsLoopbackTarget(target)) << target;
  }
}

TEST(IsLoopbackTargetTest, EverythingElseIsNot) {
  for (const char* target :
       {"10.0.0.5:50051", "128.0.0.1:1", "0.0.0.0:50051", "[::]:50051", "[::ffff:127.0.0.1]:1",
        "coordinator:50051", "coordinator.example.com:50051", "localhost.example.com:1",
        "127.0.0.1.nip.io:1", "dns:///example.com:1", "dns://127.0.0.1/example.com:1",
        "ipv4:127.0.0.1:1,10.0.0.1:1", "ipv4:", "xds:///127.0.0.1:1", "[::1:50051", ":50051", ""}) {
    EXPECT_FALSE(IsLoopbackTarget(target)) << target;
  }
}

ChannelSecurity Security(bool tls, const std::string& token) {
  ChannelSecurity security;
  if (tls) security.credentials = grpc::SslCredentials(grpc::SslCredentialsOptions());
  security.bearer_token = token;
  return security;
}

TEST(CheckTokenTransportTest, RefusesACleartextTokenToAnyOtherAddress) {
  const absl::Status refused =
      CheckTokenTransport("10.0.0.5:50051", Security(false, "t"), "--token-file /a/b");
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  for (const char* part : {"--token-file /a/b", "10.0.0.5:50051", "--tls-ca FILE", "127.0.0.1"}) {
    EXPECT_TRUE(absl::StrContains(refused.message(), part)) << part << ": " << refused;
  }
  EXPECT_FALSE(CheckTokenTransport("coordinator:1", Security(false, "t"), "x").ok());

  EXPECT_TRUE(CheckTokenTransport("10.0.0.5:50051", Security(true, "t"), "x").ok());
  EXPECT_TRUE(CheckTokenTransport("10.0.0.5:50051", Security(false, ""), "x").ok());
  EXPECT_TRUE(CheckTokenTransport("127.0.0.1:50051", Security(false, "t"), "x").ok());
}

TEST(CheckTokenTransportTest, WarnsOnlyOfACleartextToken) {
  const std::string warning =
      CleartextTokenWarning("127.0.0.1:1", Security(false, "t"), "RINGTRAIN_TOKEN");
  EXPECT_TRUE(absl::StrContains(warning,
                                "warning: sending the token of RINGTRAIN_TOKEN in "
                                "cleartext to 127.0.0.1:1"))
      << warning;
  EXPECT_EQ(CleartextTokenWarning("127.0.0.1:1", Security(true, "t"), "x"), "");
  EXPECT_EQ(CleartextTokenWarning("127.0.0.1:1", Security(false, ""), "x"), "");
}

// Records the authorization metadata of the last GetJob.
class RecordingJobService : public v1::JobService::CallbackService {
 public:
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* /*request*/,
                                   v1::Job* /*job*/) override {
    const auto& metadata = context->client_metadata();
    const auto it = metadata.find(kAuthorizationKey);
    {
      absl::MutexLock lock(&mu_);
      authorization_ =
          it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  std::string authorization() {
    absl::MutexLock lock(&mu_);
    return authorization_;
  }

 private:
  absl::Mutex mu_;
  std::string authorization_ ABSL_GUARDED_BY(mu_);
};

// This machine's first IPv4 address that is up and not loopback; "" when it has none.
std::string NonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (const ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text)) != nullptr) found = text;
  }
  freeifaddrs(list);
  return found;
}

// The authorization a GetJob through MakeChannel(target, plaintext with a token) carried.
std::string SentAuthorization(RecordingJobService& service, const std::string& target) {
  auto stub = v1::JobService::NewStub(
      MakeChannel(target, Security(false, "secret"), grpc::ChannelArguments()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetJobRequest request;
  v1::Job job;
  const grpc::Status status = stub->GetJob(&context, request, &job);
  EXPECT_TRUE(status.ok()) << target << ": " << status.error_message();
  return service.authorization();
}

TEST(MakeChannelTest, SendsACleartextTokenOnlyToALoopbackTarget) {
  const std::string host = NonLoopbackAddress();
  if (host.empty()) GTEST_SKIP() << "no network interface but loopback";
  RecordingJobService service;
  grpc::ServerBuilder builder;
  int loopback_port = 0, outside_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &loopback_port);
  builder.AddListeningPort(host + ":0", grpc::InsecureServerCredentials(), &outside_port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(outside_port, 0);

  EXPECT_EQ(SentAuthorization(service, "127.0.0.1:" + std::to_string(loopback_port)),
            "Bearer secret");
  EXPECT_EQ(SentAuthorization(service, host + ":" + std::to_string(outside_port)), "");
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace ringtrain
