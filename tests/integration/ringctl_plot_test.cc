// `ringctl plot` as a process against a fake JobService (a real gRPC server on 127.0.0.1, as in
// ringctl_service_test.cc); the drawing alone is tests/unit/plot_svg_test.cc. Every SVG is checked
// with xmllint (Debian's libxml2-utils): well-formed, and one "loss-point" element per step,
// counted by XPath.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ringtrain/v1/job_service.grpc.pb.h"
#include "tests/integration/svg_check.h"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

v1::JobEvent StepEvent(const std::string& job, int64_t step, double loss, double lr) {
  v1::JobEvent event;
  v1::StepEvent* s = event.mutable_step();
  s->set_job_id(job);
  s->set_step(step);
  s->set_loss(loss);
  s->set_lr(lr);
  s->set_grad_norm(1.5);
  s->set_tokens_per_second(1000);
  s->set_step_seconds(0.1);
  return event;
}

v1::JobEvent StateEvent(const std::string& job, v1::JobState from, v1::JobState to) {
  v1::JobEvent event;
  event.mutable_state_change()->set_job_id(job);
  event.mutable_state_change()->set_from_state(from);
  event.mutable_state_change()->set_to_state(to);
  return event;
}

// Steps 1..n with a decaying loss (NaN at `nan_step`) and a warm-up learning rate.
std::vector<v1::JobEvent> History(const std::string& job, int n, int nan_step = -1) {
  std::vector<v1::JobEvent> events = {
      StateEvent(job, v1::JOB_STATE_QUEUED, v1::JOB_STATE_ASSIGNED),
      StateEvent(job, v1::JOB_STATE_ASSIGNED, v1::JOB_STATE_RUNNING)};
  for (int step = 1; step <= n; ++step) {
    events.push_back(StepEvent(job, step, step == nan_step ? kNaN : 6 * std::exp(-step / 20.0),
                               3e-4 * std::min(1.0, step / 10.0)));
  }
  return events;
}

v1::Job MakeJob(const std::string& id, const std::string& name, v1::JobState state,
                int64_t last_step, int64_t total_steps) {
  v1::Job job;
  job.set_job_id(id);
  job.set_name(name);
  job.set_state(state);
  job.set_last_step(last_step);
  job.set_total_steps(total_steps);
  return job;
}

// job-000001: SUCCEEDED after 37 steps, step 13's loss NaN, a name that needs escaping.
// job-000002: RUNNING at step 20 of 100; its stream stays open after the history, as a live one
// does, until the client cancels it. job-000003: QUEUED, no steps.
class FakeJobService final : public v1::JobService::Service {
 public:
  FakeJobService() {
    jobs_["job-000001"] = MakeJob("job-000001", "cp4 <&> run", v1::JOB_STATE_SUCCEEDED, 37, 37);
    events_["job-000001"] = History("job-000001", 37, /*nan_step=*/13);
    events_["job-000001"].push_back(
        StateEvent("job-000001", v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED));
    jobs_["job-000002"] = MakeJob("job-000002", "live", v1::JOB_STATE_RUNNING, 20, 100);
    events_["job-000002"] = History("job-000002", 20);
    jobs_["job-000003"] = MakeJob("job-000003", "waiting", v1::JOB_STATE_QUEUED, 0, 10);
    events_["job-000003"] = {};
  }

  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                      v1::Job* job) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = jobs_.find(request->job_id());
    if (it == jobs_.end()) return {grpc::StatusCode::NOT_FOUND, "unknown job " + request->job_id()};
    *job = it->second;
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override {
    std::vector<v1::JobEvent> events;
    bool live = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      from_steps_[request->job_id()].push_back(request->from_step());
      const auto it = events_.find(request->job_id());
      if (it == events_.end()) return {grpc::StatusCode::NOT_FOUND, "unknown job"};
      events = it->second;
      live = !IsFinished(jobs_[request->job_id()].state());
    }
    for (const v1::JobEvent& event : events) {
      if (event.has_step() && event.step().step() < request->from_step()) continue;
      writer->Write(event);
    }
    if (!live) return grpc::Status::OK;
    // A live job: nothing more for now; wait for the client to go (at most 20 s).
    for (int i = 0; i < 2000 && !context->IsCancelled(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (context->IsCancelled()) ++cancelled_;
    return grpc::Status::CANCELLED;
  }

  std::vector<int64_t> from_steps(const std::string& job) {
    std::lock_guard<std::mutex> lock(mu_);
    return from_steps_[job];
  }
  int cancelled() const { return cancelled_; }

 private:
  static bool IsFinished(v1::JobState state) {
    return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
           state == v1::JOB_STATE_CANCELLED;
  }

  std::mutex mu_;
  std::map<std::string, v1::Job> jobs_;
  std::map<std::string, std::vector<v1::JobEvent>> events_;
  std::map<std::string, std::vector<int64_t>> from_steps_;
  std::atomic<int> cancelled_{0};
};

class RingctlPlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    address_ = "127.0.0.1:" + std::to_string(FreePort());
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr) << "cannot listen on " << address_;
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  // ringctl plot ARGS --coordinator ADDRESS.
  CommandResult Plot(std::vector<std::string> args) {
    args.insert(args.begin(), {BinDir() + "/ringctl", "plot"});
    args.push_back("--coordinator=" + address_);
    return RunCommand(args);
  }

  FakeJobService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  TempDir dir_;
};

TEST_F(RingctlPlotTest, AFinishedJobHasOnePointPerStep) {
  const std::string svg = dir_ / "loss.svg";
  const CommandResult result = Plot({"job-000001", "--out", svg});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Has(result.output, "wrote " + svg + " (37 steps)")) << result.output;
  int nan = 0;
  EXPECT_EQ(CountPoints(svg, &nan), 37);
  EXPECT_EQ(nan, 1);  // step 13
  const std::string text = ReadFile(svg);
  EXPECT_TRUE(Has(text, ">job-000001 (cp4 &lt;&amp;&gt; run)</text>")) << text.substr(0, 2000);
  EXPECT_TRUE(Has(text, "SUCCEEDED, steps 1–37 of 37")) << text.substr(0, 2000);
  EXPECT_TRUE(Has(text, "<title>step 13 loss NaN lr 0.0003</title>"));
  EXPECT_TRUE(Has(text, "<title>step 37 loss 0.943423 lr 0.0003</title>"));
  ExpectFiniteCoordinates(text);
  EXPECT_FALSE(std::filesystem::exists(svg + ".tmp"));
}

TEST_F(RingctlPlotTest, FromStepAndTitle) {
  const std::string svg = dir_ / "tail.svg";
  const CommandResult result =
      Plot({"job-000001", "--out", svg, "--from-step", "30", "--title", "tail <b>"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(CountPoints(svg), 8);  // steps 30..37
  EXPECT_EQ(service_.from_steps("job-000001"), std::vector<int64_t>{30});
  EXPECT_TRUE(Has(ReadFile(svg), ">tail &lt;b&gt;</text>"));
}

TEST_F(RingctlPlotTest, ARunningJobPlotsTheStepsSoFarAndCancelsTheStream) {
  const std::string svg = dir_ / "live.svg";
  const auto start = std::chrono::steady_clock::now();
  const CommandResult result = Plot({"job-000002", "--out", svg});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_LT(seconds, 10) << "waited for the live stream instead of stopping at last_step";
  EXPECT_EQ(CountPoints(svg), 20);
  EXPECT_TRUE(Has(ReadFile(svg), "RUNNING, steps 1–20 of 100"));
  for (int i = 0; i < 200 && service_.cancelled() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(service_.cancelled(), 1);
}

TEST_F(RingctlPlotTest, AJobWithoutStepsGivesAnEmptyPlotWithoutWatching) {
  const std::string svg = dir_ / "queued.svg";
  const CommandResult result = Plot({"job-000003", "--out", svg});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Has(result.output, "(0 steps)")) << result.output;
  EXPECT_EQ(CountPoints(svg), 0);
  EXPECT_TRUE(Has(ReadFile(svg), "no steps yet"));
  EXPECT_TRUE(service_.from_steps("job-000003").empty());
}

TEST_F(RingctlPlotTest, ExitStatuses) {
  const CommandResult unknown = Plot({"job-999", "--out", dir_ / "x.svg"});
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_TRUE(Has(unknown.output, "unknown job job-999; `ringctl list` shows the jobs"))
      << unknown.output;

  const CommandResult unwritable = Plot({"job-000001", "--out", dir_ / "no/such/dir/x.svg"});
  EXPECT_EQ(unwritable.exit_code, 2) << unwritable.output;
  EXPECT_TRUE(Has(unwritable.output, "cannot write --out")) << unwritable.output;

  const CommandResult no_out = Plot({"job-000001"});
  EXPECT_EQ(no_out.exit_code, 2) << no_out.output;
  EXPECT_TRUE(Has(no_out.output, "--out")) << no_out.output;

  server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
  const CommandResult unreachable = Plot({"job-000001", "--out", dir_ / "x.svg"});
  EXPECT_EQ(unreachable.exit_code, 3) << unreachable.output;
  EXPECT_TRUE(Has(unreachable.output, "cannot reach coordinator at " + address_))
      << unreachable.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x.svg"));
}

}  // namespace
}  // namespace ringtrain::testing
