// Worker identity against the real binaries: a real coordinator, a real agent and its real trainer
// run a job while a fake worker — a raw WorkerService stub in this test — tries every forgery:
// step reports and losses for the job, a start, a success and a failure for its rank, a Hello
// with the real worker's id (no credential, a wrong one), and after a coordinator restart a
// Register claiming the real worker's id and rank without its credential. Each must be refused
// and counted in ringtrain_coordinator_refused_agent_messages_total, and the job must end
// SUCCEEDED with exactly the losses its trainer wrote.
#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "ringtrain/v1/worker_service.grpc.pb.h"
#include "tests/e2e/local_cluster.h"

namespace ringtrain::testing {
namespace {

constexpr int kSteps = 400;  // long enough to still run while the forgeries are tried

std::chrono::system_clock::time_point In(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The coordinator's count of refused agent messages for `reason`; -1 when the page has none.
double Refused(const LocalCluster& cluster, const std::string& reason) {
  const std::string page = HttpGet(cluster.coordinator_metrics(), "/metrics");
  const std::string series =
      "ringtrain_coordinator_refused_agent_messages_total{reason=\"" + reason + "\"} ";
  const size_t at = page.find(series);
  return at == std::string::npos ? -1 : std::atof(page.c_str() + at + series.size());
}

// The pid of this cluster's ringtrain-worker process, found by its command line; -1 if none.
pid_t AgentPid(const LocalCluster& cluster) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline");
    const std::string cmdline((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    if (cmdline.find("ringtrain-worker") != std::string::npos &&
        cmdline.find(cluster.dir().path()) != std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

v1::RegisterRequest FakeRegistration() {
  v1::RegisterRequest request;
  request.set_device_kind("cpu");
  request.set_device("cpu");
  request.set_host_label("impostor");
  request.set_address("127.0.0.1");
  return request;
}

// One Session of the fake worker: Hello, then what the test writes.
class FakeSession {
 public:
  FakeSession(v1::WorkerService::Stub& stub, const std::string& worker_id,
              const std::string& credential)
      : stream_(stub.Session(&context_)) {
    v1::AgentMessage hello;
    hello.mutable_hello()->set_worker_id(worker_id);
    hello.mutable_hello()->set_credential(credential);
    stream_->Write(hello);
  }
  ~FakeSession() {
    if (finished_) return;
    context_.TryCancel();
    stream_->Finish();
  }
  // Whether the coordinator answered the Hello with Welcome (else the stream ended: see Finish).
  bool Welcomed() {
    v1::CoordinatorMessage message;
    return stream_->Read(&message) && message.has_welcome();
  }
  grpc::Status Finish() {
    v1::CoordinatorMessage message;
    while (stream_->Read(&message)) {
    }
    finished_ = true;
    return stream_->Finish();
  }
  void Write(const v1::AgentMessage& message) { EXPECT_TRUE(stream_->Write(message)); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::CoordinatorMessage>> stream_;
  bool finished_ = false;
};

TEST(IdentityTest, AFakeWorkerCannotSpeakForARealOneAndTheJobEndsWithItsRealLosses) {
  const auto test_start = std::chrono::steady_clock::now();
  LocalCluster cluster(1);
  // The debug config, made small: a few ms per step even on a loaded machine.
  v1::Job job = cluster.Submit(
      ConfigPath("debug_model.toml"),
      {"training.steps=" + std::to_string(kSteps), "lr_scheduler.warmup_steps=2",
       "metrics.log_freq=1000", "model.dim=64", "model.n_layers=1", "model.n_heads=4",
       "model.n_kv_heads=2", "training.seq_len=64", "training.local_batch_size=2"});
  ASSERT_FALSE(job.job_id().empty());
  ASSERT_TRUE(cluster.WaitForJob(
      job.job_id(), [](const v1::Job& j) { return j.last_step() >= 1; }, 120, "first step"));
  std::printf("submit -> first step: %.2f s\n", SecondsSince(test_start));
  const std::string real = cluster.Get(job.job_id()).mesh(0).worker_id();
  const auto forgeries_start = std::chrono::steady_clock::now();

  auto stub = v1::WorkerService::NewStub(
      grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials()));
  v1::RegisterResponse fake;
  {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    ASSERT_TRUE(stub->Register(&context, FakeRegistration(), &fake).ok());
  }
  ASSERT_NE(fake.worker_id(), real);
  ASSERT_EQ(fake.credential().size(), 64u);

  // The fake worker's own session speaks for the real worker's rank.
  {
    FakeSession session(*stub, fake.worker_id(), fake.credential());
    ASSERT_TRUE(session.Welcomed());
    for (int step = 1; step <= 20; ++step) {  // stored steps and steps still to come
      v1::AgentMessage m;
      m.mutable_rank_report()->set_job_id(job.job_id());
      m.mutable_rank_report()->set_rank(0);
      m.mutable_rank_report()->set_record_json("{\"step\": " + std::to_string(step) +
                                               ", \"loss\": 0.125}");
      session.Write(m);
    }
    v1::AgentMessage started;
    started.mutable_rank_started()->set_job_id(job.job_id());
    session.Write(started);
    v1::AgentMessage success;  // forging SUCCEEDED
    success.mutable_rank_exit()->set_job_id(job.job_id());
    session.Write(success);
    v1::AgentMessage failure = success;  // failing the job, blaming the real worker
    failure.mutable_rank_exit()->set_exit_status(1);
    failure.mutable_rank_exit()->set_stderr_tail("forged");
    session.Write(failure);
    EXPECT_TRUE(WaitFor([&] { return Refused(cluster, "not_assigned") >= 23; }, 10))
        << Refused(cluster, "not_assigned");
  }
  // Hellos with the real worker's id: no credential, then the fake's own.
  for (const std::string& credential : {std::string(), fake.credential()}) {
    FakeSession session(*stub, real, credential);
    EXPECT_FALSE(session.Welcomed());
    const grpc::Status refused = session.Finish();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED) << refused.error_message();
    EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("credential"));
  }
  EXPECT_EQ(Refused(cluster, "bad_credential"), 2);
  EXPECT_EQ(Refused(cluster, "not_assigned"), 23);

  // Nothing of it reached the job or the real worker's session.
  v1::Job running = cluster.Get(job.job_id());
  ASSERT_EQ(running.state(), v1::JOB_STATE_RUNNING)
      << "the job must still run for the forgeries to mean anything: "
      << running.ShortDebugString();
  EXPECT_LT(running.last_step(), kSteps);
  std::printf("forgeries refused in %.2f s, the job meanwhile at step %lld of %d\n",
              SecondsSince(forgeries_start), static_cast<long long>(running.last_step()), kSteps);
  EXPECT_FALSE(running.has_error()) << running.error().message();
  // The real agent's session is the one it opened first: never replaced, never re-attached.
  const std::string log = ReadFile(cluster.dir() / "coordinator-0.log");
  size_t attached = 0;
  for (size_t at = log.find(real + " session attached"); at != std::string::npos;
       at = log.find(real + " session attached", at + 1)) {
    ++attached;
  }
  EXPECT_EQ(attached, 1u) << log;
  for (const v1::Worker& w : cluster.Workers()) {
    if (w.worker_id() == real) {
      EXPECT_EQ(w.state(), v1::WORKER_STATE_BUSY);
    }
  }

  // A restart, with the real agent held still so that the impostor registers first.
  const pid_t agent = AgentPid(cluster);
  ASSERT_GT(agent, 0);
  ASSERT_EQ(kill(agent, SIGSTOP), 0);
  struct Resume {
    pid_t pid;
    ~Resume() { kill(pid, SIGCONT); }
  } resume{agent};
  const auto restart = std::chrono::steady_clock::now();
  cluster.RestartCoordinator();
  std::printf("coordinator restarted in %.2f s\n", SecondsSince(restart));
  v1::RegisterRequest claim = FakeRegistration();
  claim.set_previous_worker_id(real);
  claim.set_running_job_id(job.job_id());
  claim.set_running_rank(0);
  for (const std::string& credential : {std::string(), fake.credential()}) {
    claim.set_previous_credential(credential);
    v1::RegisterResponse response;
    grpc::Status status;
    ASSERT_TRUE(WaitFor(
        [&] {
          grpc::ClientContext context;
          context.set_deadline(In(2));
          // A fresh channel each time: the old one may still hold the stopped coordinator's.
          status = v1::WorkerService::NewStub(
                       grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials()))
                       ->Register(&context, claim, &response);
          return status.ok();
        },
        20))
        << status.error_message();
    EXPECT_NE(response.worker_id(), real);
    EXPECT_FALSE(response.rank_adopted());
  }
  EXPECT_EQ(Refused(cluster, "bad_credential"), 2);
  std::printf("impostor registrations refused %.2f s after the restart began\n",
              SecondsSince(restart));
  kill(agent, SIGCONT);
  const auto resumed = std::chrono::steady_clock::now();

  // The real agent proves its id, gets its rank back, and the job ends as its trainer ran it.
  ASSERT_TRUE(cluster.WaitForJob(job.job_id(), IsFinal, 120, "end"));
  v1::Job done = cluster.Get(job.job_id());
  std::printf("agent resumed -> job %s: %.2f s\n", v1::JobState_Name(done.state()).c_str(),
              SecondsSince(resumed));
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error().message() << cluster.Logs();
  EXPECT_EQ(done.mesh(0).worker_id(), real);
  bool back = false;
  for (const v1::Worker& w : cluster.Workers()) back = back || w.worker_id() == real;
  EXPECT_TRUE(back) << "the real agent did not get its id back\n" << cluster.Logs();

  grpc::Status status;
  std::vector<std::string> stored;
  for (const v1::JobEvent& e : cluster.Watch(job.job_id(), 0, 30, &status)) {
    if (e.has_step()) stored.push_back(RawField(e.step().record_json(), "loss"));
  }
  ASSERT_TRUE(status.ok()) << status.error_message();
  const auto written =
      ReadJsonl(cluster.dir() / ("worker-0/" + job.job_id() + "/rank-0/metrics.jsonl"));
  ASSERT_EQ(written.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(stored.size(), written.size());
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i], written[i].at("loss")) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace ringtrain::testing
