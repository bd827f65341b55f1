// Credentials and TLS against the real binaries on 127.0.0.1: a CA, a server certificate (SAN
// localhost, 127.0.0.1) and a client certificate made with `openssl` once per run; each test starts
// its own coordinator with the flags it checks, and drives it with ringctl, a raw WorkerService
// stub, the health service and a real ringtrain-worker.
#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "common/grpc/credentials.h"
#include "ringtrain/v1/job_service.grpc.pb.h"
#include "ringtrain/v1/worker_service.grpc.pb.h"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kExitUnauthenticated = 4;  // client/exit_codes.h
constexpr int kExitUnreachable = 3;

void Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult r = RunCommand(argv);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// Certificates and token files shared by every test (made once; read-only afterwards).
class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const TempDir& d = *dir_;
    WriteFile(d / "san.cnf", "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
    for (const std::string ca : {"ca", "other-ca"}) {
      Openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=" + ca,
               "-keyout", d / (ca + ".key"), "-out", d / (ca + ".crt")});
    }
    for (const std::string leaf : {"server", "client"}) {
      Openssl({"req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + leaf, "-keyout",
               d / (leaf + ".key"), "-out", d / (leaf + ".csr")});
      std::vector<std::string> sign = {"x509",
                                       "-req",
                                       "-in",
                                       d / (leaf + ".csr"),
                                       "-CA",
                                       d / "ca.crt",
                                       "-CAkey",
                                       d / "ca.key",
                                       "-CAcreateserial",
                                       "-days",
                                       "1",
                                       "-out",
                                       d / (leaf + ".crt")};
      if (leaf == "server") sign.insert(sign.end(), {"-extfile", d / "san.cnf"});
      Openssl(sign);
    }
    WriteFile(d / "client-tokens", "# ringctl users\nclient-secret-1\n\nclient-secret-2\n");
    WriteFile(d / "client-token", "client-secret-2\n");
    WriteFile(d / "join-token", "join-secret\n");
    WriteFile(d / "wrong-token", "not-a-token-we-gave\n");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static std::string F(const std::string& name) { return *dir_ / name; }

  void TearDown() override {
    if (coordinator_.running()) {
      coordinator_.Signal(SIGTERM);
      WaitCommand(coordinator_, 10);
    }
  }

  // Starts a coordinator on a free loopback port with `flags`; waits until it listens.
  void StartCoordinator(const std::vector<std::string>& flags) {
    address_ = "127.0.0.1:" + std::to_string(FreePort());
    metrics_ = "127.0.0.1:" + std::to_string(FreePort());
    std::vector<std::string> argv = {
        BinDir() + "/ringtrain-coordinator", "--listen",          address_, "--db",
        scratch_ / "ringtrain.db",           "--metrics-address", metrics_};
    argv.insert(argv.end(), flags.begin(), flags.end());
    log_ = scratch_ / ("coordinator-" + std::to_string(starts_++) + ".log");
    coordinator_ = StartCommand(argv, log_);
    ASSERT_TRUE(
        WaitFor([&] { return ReadFile(log_).find("listening on") != std::string::npos; }, 10))
        << ReadFile(log_);
  }

  // The standard protection: TLS and both token files.
  std::vector<std::string> Protected() const {
    return {"--tls-cert",          F("server.crt"),    "--tls-key",           F("server.key"),
            "--client-token-file", F("client-tokens"), "--worker-token-file", F("join-token")};
  }

  // ringctl list against the coordinator, with `args` and `env` ("NAME=value") added.
  CommandResult Ringctl(const std::vector<std::string>& args,
                        const std::vector<std::string>& env = {}) const {
    std::vector<std::string> argv = {"/usr/bin/env"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(), {BinDir() + "/ringctl", "list", "--coordinator", address_});
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }

  // A Register call on a channel with `security`.
  grpc::Status Register(const ChannelSecurity& security) const {
    auto stub =
        v1::WorkerService::NewStub(MakeChannel(address_, security, grpc::ChannelArguments()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::RegisterRequest request;
    request.set_device_kind("cpu");
    request.set_device("cpu");
    request.set_host_label("test");
    request.set_address("127.0.0.1");
    v1::RegisterResponse response;
    return stub->Register(&context, request, &response);
  }

  ChannelSecurity Tls(const std::string& token = "") const {
    absl::StatusOr<ChannelSecurity> security = LoadChannelSecurity({F("ca.crt"), "", ""}, token);
    EXPECT_TRUE(security.ok()) << security.status();
    return security.ok() ? *security : ChannelSecurity();
  }

  static TempDir* dir_;
  TempDir scratch_;
  std::string address_;
  std::string metrics_;
  std::string log_;
  int starts_ = 0;
  Subprocess coordinator_;
};

TempDir* SecurityTest::dir_ = nullptr;

TEST_F(SecurityTest, TlsWorksWithTheCaAndFailsClearlyWithoutIt) {
  StartCoordinator({"--tls-cert", F("server.crt"), "--tls-key", F("server.key")});
  const CommandResult with_ca = Ringctl({"--tls-ca", F("ca.crt")});
  EXPECT_EQ(with_ca.exit_code, 0) << with_ca.output;
  EXPECT_THAT(with_ca.output, HasSubstr("no jobs"));
  const CommandResult from_env = Ringctl({}, {"RINGTRAIN_TLS_CA=" + F("ca.crt")});
  EXPECT_EQ(from_env.exit_code, 0) << from_env.output;

  const CommandResult plaintext = Ringctl({});
  EXPECT_EQ(plaintext.exit_code, kExitUnreachable) << plaintext.output;
  EXPECT_THAT(plaintext.output, HasSubstr("give --tls-ca FILE or RINGTRAIN_TLS_CA"));
  const CommandResult unknown_ca = Ringctl({"--tls-ca", F("other-ca.crt")});
  EXPECT_EQ(unknown_ca.exit_code, kExitUnreachable) << unknown_ca.output;
  EXPECT_THAT(unknown_ca.output, HasSubstr("TLS failed"));  // gRPC's own words vary by timing
}

TEST_F(SecurityTest, MutualTlsRefusesAClientWithoutACertificate) {
  StartCoordinator({"--tls-cert", F("server.crt"), "--tls-key", F("server.key"), "--tls-client-ca",
                    F("ca.crt")});
  const CommandResult no_cert = Ringctl({"--tls-ca", F("ca.crt")});
  EXPECT_EQ(no_cert.exit_code, kExitUnreachable) << no_cert.output;
  EXPECT_THAT(no_cert.output, HasSubstr("TLS failed"));
  const CommandResult with_cert = Ringctl(
      {"--tls-ca", F("ca.crt"), "--tls-cert", F("client.crt"), "--tls-key", F("client.key")});
  EXPECT_EQ(with_cert.exit_code, 0) << with_cert.output;
}

TEST_F(SecurityTest, JobServiceTakesOnlyAClientToken) {
  StartCoordinator(Protected());
  const std::string ca = F("ca.crt");
  const CommandResult missing = Ringctl({"--tls-ca", ca});
  EXPECT_EQ(missing.exit_code, kExitUnauthenticated) << missing.output;
  EXPECT_THAT(missing.output,
              HasSubstr("JobService needs a client token: ringctl --token-file FILE or "
                        "RINGTRAIN_TOKEN"));
  const CommandResult wrong = Ringctl({"--tls-ca", ca, "--token-file", F("wrong-token")});
  EXPECT_EQ(wrong.exit_code, kExitUnauthenticated) << wrong.output;
  EXPECT_THAT(wrong.output, HasSubstr("JobService refused the client token"));
  const CommandResult join = Ringctl({"--tls-ca", ca, "--token-file", F("join-token")});
  EXPECT_EQ(join.exit_code, kExitUnauthenticated) << join.output;

  const CommandResult file = Ringctl({"--tls-ca", ca, "--token-file", F("client-token")});
  EXPECT_EQ(file.exit_code, 0) << file.output;
  const CommandResult env = Ringctl({"--tls-ca", ca}, {"RINGTRAIN_TOKEN=client-secret-1"});
  EXPECT_EQ(env.exit_code, 0) << env.output;

  const CommandResult bad_file = Ringctl({"--tls-ca", ca, "--token-file", F("nope")});
  EXPECT_EQ(bad_file.exit_code, 2) << bad_file.output;
  EXPECT_THAT(bad_file.output, HasSubstr("--token-file " + F("nope") + ": cannot read it"));

  // StreamLogs (ringctl logs) is checked like every other call: refused before the job is looked
  // up; with the client token it gets as far as the (unknown) job.
  auto stream_logs = [&](const std::string& token) {
    auto stub =
        v1::JobService::NewStub(MakeChannel(address_, Tls(token), grpc::ChannelArguments()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StreamLogsRequest request;
    request.set_job_id("job-000001");
    auto reader = stub->StreamLogs(&context, request);
    v1::StreamLogsResponse response;
    while (reader->Read(&response)) {
    }
    return reader->Finish();
  };
  EXPECT_EQ(stream_logs("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stream_logs("join-secret").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stream_logs("client-secret-1").error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(SecurityTest, WorkerServiceTakesOnlyAJoinTokenAndHealthStaysOpen) {
  StartCoordinator(Protected());
  const grpc::Status missing = Register(Tls());
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(missing.error_message(),
              HasSubstr("WorkerService needs a join token: ringtrain-worker --join-token-file"));
  const grpc::Status wrong = Register(Tls("not-a-token-we-gave"));
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(wrong.error_message(), HasSubstr("WorkerService refused the join token"));
  const grpc::Status client_token = Register(Tls("client-secret-1"));
  EXPECT_EQ(client_token.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status right = Register(Tls("join-secret"));
  EXPECT_TRUE(right.ok()) << right.error_message();

  // grpc.health.v1 answers without any token (Kubernetes probes carry none).
  grpc::GenericStub generic(MakeChannel(address_, Tls(), grpc::ChannelArguments()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;  // HealthCheckRequest{service: ""}
  std::promise<grpc::Status> done;
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&done](grpc::Status s) { done.set_value(s); });
  const grpc::Status health = done.get_future().get();
  ASSERT_TRUE(health.ok()) << health.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status = SERVING

  // Every refusal above is counted as UNAUTHENTICATED.
  EXPECT_THAT(HttpGet(metrics_, "/metrics"), HasSubstr("UNAUTHENTICATED"));
}

TEST_F(SecurityTest, AnAuthenticatedWorkerTrainsAndAWrongJoinTokenEndsTheAgent) {
  StartCoordinator(Protected());
  CommandResult refused = RunCommand({BinDir() + "/ringtrain-worker", "--coordinator", address_,
                                      "--work-dir", scratch_ / "refused", "--tls-ca", F("ca.crt"),
                                      "--join-token-file", F("wrong-token"), "--metrics-address",
                                      "127.0.0.1:" + std::to_string(FreePort())});
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("WorkerService refused the join token"));

  Subprocess worker =
      StartCommand({BinDir() + "/ringtrain-worker", "--coordinator", address_, "--work-dir",
                    scratch_ / "worker", "--threads", "1", "--advertise-address", "127.0.0.1",
                    "--tls-ca", F("ca.crt"), "--join-token-file", F("join-token"),
                    "--metrics-address", "127.0.0.1:" + std::to_string(FreePort())},
                   scratch_ / "worker.log");
  const std::string ca = F("ca.crt");
  const CommandResult up =
      RunCommand({BinDir() + "/ringctl", "workers", "--coordinator", address_, "--wait", "1",
                  "--timeout", "30", "--tls-ca", ca, "--token-file", F("client-token")});
  ASSERT_EQ(up.exit_code, 0) << up.output << ReadFile(scratch_ / "worker.log");
  const CommandResult job =
      RunCommand({BinDir() + "/ringctl", "submit", ConfigPath("debug_model.toml"), "--coordinator",
                  address_, "--tls-ca", ca, "--token-file", F("client-token"), "--follow",
                  "--training.steps=3", "--lr_scheduler.warmup_steps=1"});
  EXPECT_EQ(job.exit_code, 0) << job.output << ReadFile(scratch_ / "worker.log") << ReadFile(log_);
  EXPECT_THAT(job.output, HasSubstr("SUCCEEDED"));
  worker.Signal(SIGTERM);
  EXPECT_EQ(WaitCommand(worker, 15), 0);
}

TEST_F(SecurityTest, AnUnprotectedNonLoopbackListenIsRefusedUnlessInsecure) {
  const std::string any = "0.0.0.0:" + std::to_string(FreePort());
  const CommandResult refused = RunCommand({BinDir() + "/ringtrain-coordinator", "--listen", any,
                                            "--db", scratch_ / "refused.db", "--tls-cert",
                                            F("server.crt"), "--tls-key", F("server.key")});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("refusing to listen on " + any));
  EXPECT_THAT(refused.output, HasSubstr("--client-token-file"));
  EXPECT_THAT(refused.output, HasSubstr("--insecure"));
  EXPECT_THAT(refused.output, ::testing::Not(HasSubstr("TLS (--tls-cert")));

  const CommandResult bad_key =
      RunCommand({BinDir() + "/ringtrain-coordinator", "--db", scratch_ / "bad.db", "--tls-cert",
                  F("server.crt"), "--tls-key", F("client.key")});
  EXPECT_EQ(bad_key.exit_code, 2) << bad_key.output;
  EXPECT_THAT(bad_key.output,
              HasSubstr("--tls-key " + F("client.key") + " is not the private key"));

  // --insecure listens anyway, with a warning; so does a fully protected coordinator.
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--insecure"}, Protected()}) {
    std::vector<std::string> argv = {BinDir() + "/ringtrain-coordinator",
                                     "--listen",
                                     "0.0.0.0:" + std::to_string(FreePort()),
                                     "--db",
                                     scratch_ / ("open-" + std::to_string(starts_) + ".db"),
                                     "--metrics-address",
                                     "127.0.0.1:" + std::to_string(FreePort())};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const std::string log = scratch_ / ("open-" + std::to_string(starts_++) + ".log");
    Subprocess open = StartCommand(argv, log);
    EXPECT_TRUE(
        WaitFor([&] { return ReadFile(log).find("listening on") != std::string::npos; }, 10))
        << ReadFile(log);
    if (flags.size() == 1) EXPECT_THAT(ReadFile(log), HasSubstr("--insecure: serving"));
    open.Signal(SIGTERM);
    EXPECT_EQ(WaitCommand(open, 10), 0);
  }
}

}  // namespace
}  // namespace ringtrain::testing
