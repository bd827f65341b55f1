// The gRPC wire end to end on loopback: a callback JobService, the standard health and reflection
// services, Status mapping, server streaming, and a bounded failure when nothing listens.

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/grpc/client_util.h"
#include "common/grpc/server_util.h"
#include "ringtrain/v1/job_service.grpc.pb.h"
#include "worker/launcher/launch_port.h"

namespace ringtrain {
namespace {

using namespace std::chrono_literals;

// WatchJob: writes kSteps StepEvents, one per OnWriteDone, then finishes OK.
class StepWriter : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  static constexpr int kSteps = 3;
  explicit StepWriter(std::string job_id) : job_id_(std::move(job_id)) { NextWrite(); }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    NextWrite();
  }
  void OnDone() override { delete this; }

 private:
  void NextWrite() {
    if (step_ == kSteps) return Finish(grpc::Status::OK);
    ++step_;
    v1::StepEvent* s = event_.mutable_step();
    s->set_job_id(job_id_);
    s->set_step(step_);
    s->set_loss(10.0 / step_);
    StartWrite(&event_);
  }
  std::string job_id_;
  int step_ = 0;
  v1::JobEvent event_;  // Must outlive the pending write.
};

class FakeJobService : public v1::JobService::CallbackService {
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                   v1::Job*) override {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(ToGrpcStatus(absl::NotFoundError("no job " + req->job_id())));
    return r;
  }
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext*,
                                                   const v1::WatchJobRequest* req) override {
    return new StepWriter(req->job_id());
  }
};

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// One request, one response over a raw bidi stream (for grpc.reflection, whose stubs Debian lacks).
class OneShotBidi : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  OneShotBidi(grpc::GenericStub* stub, grpc::ClientContext* ctx, const std::string& method,
              const std::string& request)
      : request_(ToBuffer(request)) {
    stub->PrepareBidiStreamingCall(ctx, method, grpc::StubOptions(), this);
    StartWrite(&request_);
    StartRead(&response_);
    StartCall();
  }
  void OnWriteDone(bool) override { StartWritesDone(); }
  void OnReadDone(bool ok) override {
    if (ok) bytes_ = FromBuffer(response_);
  }
  void OnDone(const grpc::Status& status) override { done_.set_value(status); }
  // Blocks until the call ends; returns its status and the first response's bytes.
  grpc::Status Await(std::string* bytes) {
    grpc::Status status = done_.get_future().get();
    *bytes = bytes_;
    return status;
  }

 private:
  grpc::ByteBuffer request_, response_;
  std::string bytes_;
  std::promise<grpc::Status> done_;
};

class GrpcWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EnableStandardServices();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    target_ = "127.0.0.1:" + std::to_string(port_);
    channel_ = grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (server_) server_->Shutdown(DeadlineIn(2000ms));  // Cancels whatever is still running.
  }

  FakeJobService service_;
  int port_ = 0;
  std::string target_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GrpcWireTest, HealthServiceReportsServing) {
  grpc::GenericStub stub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(2000ms));
  grpc::ByteBuffer request = ToBuffer(""), response;  // HealthCheckRequest{service: ""}.
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(s); });
  grpc::Status status = done.get_future().get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(FromBuffer(response), std::string("\x08\x01", 2));  // status (field 1) = SERVING (1).
}

TEST_F(GrpcWireTest, ReflectionListsServices) {
  grpc::GenericStub stub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(2000ms));
  // ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
  OneShotBidi call(&stub, &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                   std::string("\x3a\x00", 2));
  std::string bytes;
  grpc::Status status = call.Await(&bytes);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(absl::StrContains(bytes, "grpc.reflection.v1alpha.ServerReflection")) << bytes;
  EXPECT_TRUE(absl::StrContains(bytes, "ringtrain.v1.JobService")) << bytes;
}

TEST_F(GrpcWireTest, NotFoundMapsThroughFromGrpcStatus) {
  auto stub = v1::JobService::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(2000ms));
  v1::GetJobRequest req;
  req.set_job_id("j-42");
  v1::Job job;
  absl::Status status = FromGrpcStatus(stub->GetJob(&ctx, req, &job), "GetJob");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "GetJob: no job j-42");
}

// Bytes of `message` in the grpc-message trailer: percent-encoded outside printable ASCII and '%'.
size_t WireSize(const std::string& message) {
  size_t n = 0;
  for (const char c : message) n += (c >= 0x20 && c <= 0x7e && c != '%') ? 1 : 3;
  return n;
}

// The fake echoes the job id in its NOT_FOUND, as the coordinator's store does. Uncapped, a 200 KB
// id made the trailers too large and the client saw RESOURCE_EXHAUSTED ("received metadata size
// exceeds hard limit") instead of the error.
TEST_F(GrpcWireTest, HugeErrorMessageStillReachesTheClientAsTheError) {
  auto stub = v1::JobService::NewStub(channel_);
  for (const char fill : {'x', '\x01'}) {  // printable, and bytes that percent-encode to three
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(2000ms));
    v1::GetJobRequest req;
    req.set_job_id(std::string(200 * 1024, fill));
    v1::Job job;
    const grpc::Status status = stub->GetJob(&ctx, req, &job);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND)
        << status.error_message().substr(0, 200);
    EXPECT_TRUE(absl::StartsWith(status.error_message(), "no job "))
        << status.error_message().substr(0, 200);
    EXPECT_TRUE(absl::EndsWith(status.error_message(), "(cut: the message is 204807 bytes)"))
        << status.error_message().substr(0, 200);
    EXPECT_LE(WireSize(status.error_message()), kMaxStatusMessageWireBytes);
  }
}

TEST(CapStatusMessageTest, KeepsShortMessagesAndCutsLongOnesOnCharacters) {
  EXPECT_EQ(CapStatusMessage("no job j-1"), "no job j-1");
  const std::string fits(kMaxStatusMessageWireBytes, 'a');
  EXPECT_EQ(CapStatusMessage(fits), fits);
  // Each 日 (3 bytes) takes 9 on the wire: the cut lands between characters, within the budget.
  std::string wide;
  for (int i = 0; i < 1000; ++i) wide += "日";
  const std::string capped = CapStatusMessage(wide, 1000);
  EXPECT_TRUE(absl::EndsWith(capped, " \xe2\x80\xa6 (cut: the message is 3000 bytes)")) << capped;
  EXPECT_EQ(capped.find(" \xe2\x80\xa6") % 3, 0u) << "a character was split";
  EXPECT_LE(WireSize(capped), 1000u);
  EXPECT_GT(WireSize(capped), 1000u - 9);
  const grpc::Status status = ToGrpcStatus(absl::InvalidArgumentError(std::string(100000, '%')));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LE(WireSize(status.error_message()), kMaxStatusMessageWireBytes);
}

TEST_F(GrpcWireTest, WatchJobStreamsSteps) {
  auto stub = v1::JobService::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(2000ms));
  v1::WatchJobRequest req;
  req.set_job_id("j-1");
  auto reader = stub->WatchJob(&ctx, req);
  std::vector<int64_t> steps;
  v1::JobEvent event;
  while (reader->Read(&event)) {
    ASSERT_TRUE(event.has_step());
    EXPECT_EQ(event.step().job_id(), "j-1");
    steps.push_back(event.step().step());
  }
  grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3}));
}

// A loopback port nobody listens on: below the ephemeral range, so the client's own outgoing
// connection cannot take it and connect to itself.
int UnusedPort() {
  absl::StatusOr<int> port = PickFreePort("127.0.0.1");
  EXPECT_TRUE(port.ok()) << port.status();
  return port.ok() ? *port : 0;
}

TEST(GrpcClientTest, UnreachableServerFailsWithinDeadline) {
  const std::string target = "127.0.0.1:" + std::to_string(UnusedPort());
  auto stub =
      v1::JobService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(300ms));
  v1::ListJobsResponse resp;
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = FromGrpcStatus(stub->ListJobs(&ctx, v1::ListJobsRequest(), &resp),
                                       "coordinator at " + target);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
  EXPECT_TRUE(status.code() == absl::StatusCode::kUnavailable ||
              status.code() == absl::StatusCode::kDeadlineExceeded)
      << status;
  EXPECT_TRUE(absl::StartsWith(status.message(), "cannot reach coordinator at " + target + ": "))
      << status;
}

TEST(GrpcClientTest, StatusRoundTripKeepsCode) {
  absl::Status s = FromGrpcStatus(ToGrpcStatus(absl::InvalidArgumentError("bad cp")), "SubmitJob");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "SubmitJob: bad cp");
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "x").ok());
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace ringtrain
