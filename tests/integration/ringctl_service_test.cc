// ringctl's service subcommands as a process, against a fake JobService: a real gRPC server (sync
// API) on 127.0.0.1 that serves canned jobs, workers and watch events and records what it is sent.
// Checks the requests, the tables, the JSON (losses bitwise), the exit statuses, the reconnection
// of a broken watch, loss-compare --coordinator, and an unreachable coordinator.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ringtrain/v1/job_service.grpc.pb.h"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

using v1::JobEvent;
using v1::JobState;

constexpr const char* kLosses[] = {"6.7041950225830078", "5.7041950225830078", "4.7041950225830078",
                                   "3.7041950225830078"};

JobEvent State(const std::string& job, JobState from, JobState to, const std::string& message) {
  JobEvent event;
  v1::StateChange* change = event.mutable_state_change();
  change->set_job_id(job);
  change->set_from_state(from);
  change->set_to_state(to);
  change->set_message(message);
  change->mutable_time()->set_seconds(1714564800 + to);
  return event;
}

// Step `step` (1-based) with kLosses[step - 1], in the record as the trainer writes it.
JobEvent Step(const std::string& job, int step) {
  JobEvent event;
  v1::StepEvent* s = event.mutable_step();
  s->set_job_id(job);
  s->set_step(step);
  s->set_loss(std::strtod(kLosses[step - 1], nullptr));
  s->set_grad_norm(2.5);
  s->set_lr(0.0003);
  s->set_tokens_per_second(1234.5);
  s->set_step_seconds(0.25);
  s->set_record_json("{\"step\": " + std::to_string(step) + ", \"loss\": " + kLosses[step - 1] +
                     ", \"grad_norm\": 2.5, \"lr\": 0.00029999999999999997, \"ranks\": "
                     "[{\"rank\": 0, \"bytes_sent\": 10}]}\n");
  return event;
}

// A job that runs `steps` steps and then ends in `end` (with `message`).
std::vector<JobEvent> Script(const std::string& job, int steps, JobState end,
                             const std::string& message = "") {
  std::vector<JobEvent> events = {
      State(job, v1::JOB_STATE_QUEUED, v1::JOB_STATE_ASSIGNED, "placed on 4 workers"),
      State(job, v1::JOB_STATE_ASSIGNED, v1::JOB_STATE_RUNNING, "")};
  for (int i = 1; i <= steps; ++i) events.push_back(Step(job, i));
  events.push_back(State(job, v1::JOB_STATE_RUNNING, end, message));
  return events;
}

v1::Job MakeJob(const std::string& id, const std::string& name, JobState state, int64_t last_step) {
  v1::Job job;
  job.set_job_id(id);
  job.set_name(name);
  job.set_state(state);
  job.set_world_size(4);
  job.set_dp(1);
  job.set_cp(4);
  job.set_device_kind("cpu");
  job.set_total_steps(3);
  job.set_last_step(last_step);
  if (last_step > 0) job.set_last_loss(std::strtod(kLosses[last_step - 1], nullptr));
  job.mutable_submitted_time()->set_seconds(1714564800);
  for (int rank = 0; rank < 4; ++rank) {
    v1::RankPlacement* p = job.add_mesh();
    p->set_rank(rank);
    p->set_worker_id("worker-000" + std::to_string(rank + 1));
  }
  return job;
}

class FakeJobService final : public v1::JobService::Service {
 public:
  FakeJobService() {
    jobs_["job-000001"] = MakeJob("job-000001", "running-job", v1::JOB_STATE_RUNNING, 2);
    v1::Job failed = MakeJob("job-000002", "failing-job", v1::JOB_STATE_FAILED, 1);
    failed.mutable_error()->set_rank(2);
    failed.mutable_error()->set_worker_id("worker-0003");
    failed.mutable_error()->set_exit_status(134);
    failed.mutable_error()->set_stderr_tail("E step 2: NaN loss\nAborted (core dumped)\n");
    failed.mutable_error()->set_message("rank 2 exited with status 134");
    jobs_["job-000002"] = failed;
    events_["job-000002"] =
        Script("job-000002", 1, v1::JOB_STATE_FAILED, "rank 2 exited with status 134");
    jobs_["job-000003"] = MakeJob("job-000003", "good-job", v1::JOB_STATE_SUCCEEDED, 3);
    events_["job-000003"] = Script("job-000003", 3, v1::JOB_STATE_SUCCEEDED);
    // job-000004's first stream breaks after step 2; the second (from step 3) finishes it.
    jobs_["job-000004"] = MakeJob("job-000004", "flaky-job", v1::JOB_STATE_RUNNING, 2);
    events_["job-000004"] = Script("job-000004", 4, v1::JOB_STATE_SUCCEEDED);
  }

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* request,
                         v1::Job* job) override {
    std::lock_guard<std::mutex> lock(mu_);
    submits_.push_back(*request);
    if (request->config_toml().find("invalid") != std::string::npos) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "training.steps = -1: must be positive"};
    }
    const std::string id = "job-00000" + std::to_string(7 + submits_.size() - 1);
    *job = MakeJob(id, request->name(), v1::JOB_STATE_QUEUED, 0);
    jobs_[id] = MakeJob(id, request->name(), v1::JOB_STATE_SUCCEEDED, 3);
    events_[id] = Script(id, 3, v1::JOB_STATE_SUCCEEDED);
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* request,
                      v1::Job* job) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = jobs_.find(request->job_id());
    if (it == jobs_.end()) return {grpc::StatusCode::NOT_FOUND, "unknown job " + request->job_id()};
    *job = it->second;
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest*,
                        v1::ListJobsResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto token = context->client_metadata().find("authorization");
    list_authorization_ = token == context->client_metadata().end()
                              ? ""
                              : std::string(token->second.data(), token->second.size());
    for (const char* id : {"job-000003", "job-000002", "job-000001"}) {
      *response->add_jobs() = jobs_[id];
    }
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* request,
                         v1::Job* job) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = jobs_.find(request->job_id());
    if (it == jobs_.end()) return {grpc::StatusCode::NOT_FOUND, "unknown job " + request->job_id()};
    // As the coordinator: a finished job is returned as it is.
    const v1::JobState state = it->second.state();
    if (state != v1::JOB_STATE_SUCCEEDED && state != v1::JOB_STATE_FAILED) {
      it->second.set_state(v1::JOB_STATE_CANCELLED);
    }
    *job = it->second;
    return grpc::Status::OK;
  }

  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<JobEvent>* writer) override {
    std::vector<JobEvent> events;
    bool break_after_step_2 = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      watch_from_steps_[request->job_id()].push_back(request->from_step());
      const auto it = events_.find(request->job_id());
      if (it == events_.end()) return {grpc::StatusCode::NOT_FOUND, "unknown job"};
      events = it->second;
      break_after_step_2 =
          request->job_id() == "job-000004" && watch_from_steps_["job-000004"].size() == 1;
    }
    for (const JobEvent& event : events) {
      if (event.has_step() && event.step().step() < request->from_step()) continue;
      writer->Write(event);
      if (break_after_step_2 && event.has_step() && event.step().step() == 2) {
        return {grpc::StatusCode::UNAVAILABLE, "coordinator restarting"};
      }
    }
    if (request->job_id() == "job-000004") {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_["job-000004"].set_state(v1::JOB_STATE_SUCCEEDED);
    }
    return grpc::Status::OK;
  }

  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* response) override {
    v1::Worker* idle = response->add_workers();
    idle->set_worker_id("worker-0001");
    idle->set_device_kind("cpu");
    idle->set_host_label("hostA");
    idle->set_address("10.0.0.1");
    idle->set_state(v1::WORKER_STATE_IDLE);
    v1::Worker* busy = response->add_workers();
    *busy = *idle;
    busy->set_worker_id("worker-0002");
    busy->set_device_kind("cuda");
    busy->set_device("cuda:0");
    busy->set_device_name("NVIDIA H200");
    busy->set_device_memory_bytes(150110011392);
    busy->set_state(v1::WORKER_STATE_BUSY);
    busy->set_job_id("job-000001");
    busy->set_rank(3);
    return grpc::Status::OK;
  }

  std::vector<v1::SubmitJobRequest> submits() {
    std::lock_guard<std::mutex> lock(mu_);
    return submits_;
  }
  std::vector<int64_t> watch_from_steps(const std::string& job) {
    std::lock_guard<std::mutex> lock(mu_);
    return watch_from_steps_[job];
  }
  // The authorization metadata of the last ListJobs ("" when it had none).
  std::string list_authorization() {
    std::lock_guard<std::mutex> lock(mu_);
    return list_authorization_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, v1::Job> jobs_;
  std::map<std::string, std::vector<JobEvent>> events_;
  std::vector<v1::SubmitJobRequest> submits_;
  std::map<std::string, std::vector<int64_t>> watch_from_steps_;
  std::string list_authorization_;
};

class RingctlServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    address_ = "127.0.0.1:" + std::to_string(FreePort());
    StartServer();
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  void StartServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr) << "cannot listen on " << address_;
  }

  // ringctl ARGS --coordinator ADDRESS, with `env` ("NAME=value") added to its environment.
  CommandResult Ringctl(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
    args.insert(args.begin(), BinDir() + "/ringctl");
    args.insert(args.begin(), env.begin(), env.end());
    args.insert(args.begin(), "/usr/bin/env");
    args.push_back("--coordinator=" + address_);
    return RunCommand(args);
  }

  // The output's lines that start with '{' or '[' (JSON), each checked to parse.
  static std::vector<nlohmann::json> JsonLines(const std::string& output) {
    std::vector<nlohmann::json> lines;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || (line[0] != '{' && line[0] != '[')) continue;
      lines.push_back(nlohmann::json::parse(line));  // throws (fails the test) if invalid
    }
    return lines;
  }

  FakeJobService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  TempDir dir_;
};

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(RingctlServiceTest, SubmitSendsTheFileTheStrippedOverridesAndTheName) {
  const std::string config = dir_ / "job.toml";
  WriteFile(config, "[training]\nsteps = 3  # any text: the coordinator validates\n");
  const CommandResult result =
      Ringctl({"submit", "--training.steps=7", config, "--name", "my-job", "--model.dim", "64",
               "--device-kind=cpu", "parallelism.context_parallel_degree=4"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Has(result.output, "submitted job-000007 (world 4 = dp 1 × cp 4, cpu)"))
      << result.output;
  const std::vector<v1::SubmitJobRequest> submits = service_.submits();
  ASSERT_EQ(submits.size(), 1u);
  EXPECT_EQ(submits[0].config_toml(), ReadFile(config));
  EXPECT_EQ(std::vector<std::string>(submits[0].overrides().begin(), submits[0].overrides().end()),
            (std::vector<std::string>{"training.steps=7", "model.dim=64",
                                      "parallelism.context_parallel_degree=4"}));
  EXPECT_EQ(submits[0].name(), "my-job");
  EXPECT_EQ(submits[0].device_kind(), "cpu");

  const CommandResult json = Ringctl({"submit", config, "--output", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const std::vector<nlohmann::json> lines = JsonLines(json.output);
  ASSERT_EQ(lines.size(), 1u) << json.output;
  EXPECT_EQ(lines[0]["job_id"], "job-000008");
  EXPECT_EQ(lines[0]["state"], "JOB_STATE_QUEUED");
}

TEST_F(RingctlServiceTest, SubmitErrorsAreUsageErrors) {
  const std::string bad = dir_ / "bad.toml";
  WriteFile(bad, "invalid\n");
  const CommandResult rejected = Ringctl({"submit", bad});
  EXPECT_EQ(rejected.exit_code, 2) << rejected.output;
  EXPECT_TRUE(Has(rejected.output, "training.steps = -1: must be positive")) << rejected.output;
  const CommandResult missing = Ringctl({"submit", dir_ / "nope.toml"});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_TRUE(Has(missing.output, "cannot read config")) << missing.output;
  const CommandResult stray = Ringctl({"submit", bad, "extra-arg"});
  EXPECT_EQ(stray.exit_code, 2) << stray.output;
  EXPECT_TRUE(Has(stray.output, "unexpected argument 'extra-arg'")) << stray.output;
  EXPECT_EQ(service_.submits().size(), 1u);  // only the rejected one reached the coordinator
}

TEST_F(RingctlServiceTest, SubmitFollowWatchesToTheEnd) {
  const std::string config = dir_ / "job.toml";
  WriteFile(config, "[training]\n");
  const CommandResult result = Ringctl({"submit", config, "--follow"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Has(result.output, "submitted job-000007")) << result.output;
  EXPECT_TRUE(Has(result.output, "job-000007 RUNNING → SUCCEEDED")) << result.output;
}

TEST_F(RingctlServiceTest, ListAndGetPrintTablesAndJson) {
  const CommandResult list = Ringctl({"list"});
  ASSERT_EQ(list.exit_code, 0) << list.output;
  for (const char* part :
       {"ID", "STATE", "MESH", "WAIT REASON / ERROR", "job-000001", "running-job", "1×4", "2/3",
        "5.7042", "rank 2 exited with status 134"}) {
    EXPECT_TRUE(Has(list.output, part)) << part << " in\n" << list.output;
  }
  const std::vector<nlohmann::json> jobs = JsonLines(Ringctl({"list", "--output=json"}).output);
  ASSERT_EQ(jobs.size(), 1u);
  ASSERT_TRUE(jobs[0].is_array());
  ASSERT_EQ(jobs[0].size(), 3u);
  EXPECT_EQ(jobs[0][0]["job_id"], "job-000003");

  const CommandResult get = Ringctl({"get", "job-000002"});
  ASSERT_EQ(get.exit_code, 0) << get.output;
  for (const char* part :
       {"failing-job", "FAILED", "world 4 = dp 1 × cp 4, cpu", "rank 3 → worker-0004",
        "exit status 134", "| Aborted (core dumped)", "2024-05-01T12:00:00Z", "1/3"}) {
    EXPECT_TRUE(Has(get.output, part)) << part << " in\n" << get.output;
  }
  const std::vector<nlohmann::json> job =
      JsonLines(Ringctl({"get", "job-000002", "--output", "json"}).output);
  ASSERT_EQ(job.size(), 1u);
  EXPECT_EQ(job[0]["error"]["worker_id"], "worker-0003");
  EXPECT_EQ(job[0]["mesh"].size(), 4u);

  const CommandResult unknown = Ringctl({"get", "job-999"});
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_TRUE(Has(unknown.output, "ringctl get: coordinator at " + address_ +
                                      ": unknown job job-999; `ringctl list` shows the jobs"))
      << unknown.output;
}

TEST_F(RingctlServiceTest, WorkersTableJsonAndWait) {
  const CommandResult table = Ringctl({"workers"});
  ASSERT_EQ(table.exit_code, 0) << table.output;
  for (const char* part :
       {"LAST HEARTBEAT", "worker-0001", "IDLE", "BUSY", "job-000001/3", "10.0.0.1", "hostA",
        "DEVICE", "MEMORY", "cuda:0 NVIDIA H200  139.8 GiB"}) {
    EXPECT_TRUE(Has(table.output, part)) << part << " in\n" << table.output;
  }
  const std::vector<nlohmann::json> json = JsonLines(Ringctl({"workers", "--output=json"}).output);
  ASSERT_EQ(json.size(), 1u);
  ASSERT_EQ(json[0].size(), 2u);
  EXPECT_EQ(json[0][1]["state"], "WORKER_STATE_BUSY");
  EXPECT_EQ(json[0][1]["device"], "cuda:0");
  EXPECT_EQ(json[0][1]["device_name"], "NVIDIA H200");
  EXPECT_EQ(json[0][1]["device_memory_bytes"], "150110011392");  // proto3 JSON: uint64 as a string
  EXPECT_EQ(json[0][0]["device_memory_bytes"], "0");

  EXPECT_EQ(Ringctl({"workers", "--wait", "1"}).exit_code, 0);
  const CommandResult timeout = Ringctl({"workers", "--wait", "2", "--timeout", "0.5"});
  EXPECT_EQ(timeout.exit_code, 3) << timeout.output;
  EXPECT_TRUE(Has(timeout.output, "timed out")) << timeout.output;
  EXPECT_TRUE(Has(timeout.output, "1 idle of 2")) << timeout.output;
}

TEST_F(RingctlServiceTest, WatchSucceededPrintsEveryEventAndExitsZero) {
  const CommandResult result = Ringctl({"watch", "job-000003"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (const char* part :
       {"job-000003 QUEUED → ASSIGNED: placed on 4 workers", "job-000003 ASSIGNED → RUNNING",
        "step 1/3  loss 6.7042  1234 tok/s", "step 2/3", "step 3/3  loss 4.7042",
        "job-000003 RUNNING → SUCCEEDED", "ETA 0:01"}) {
    EXPECT_TRUE(Has(result.output, part)) << part << " in\n" << result.output;
  }
}

TEST_F(RingctlServiceTest, WatchFailedShowsTheErrorAndExitsOne) {
  const CommandResult result = Ringctl({"watch", "job-000002"});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  for (const char* part : {"RUNNING → FAILED: rank 2 exited with status 134",
                           "rank 2 on worker worker-0003 exited with status 134",
                           "E step 2: NaN loss", "Aborted (core dumped)"}) {
    EXPECT_TRUE(Has(result.output, part)) << part << " in\n" << result.output;
  }
  const CommandResult unknown = Ringctl({"watch", "job-999"});
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
}

TEST_F(RingctlServiceTest, WatchJsonKeepsLossesBitwise) {
  const CommandResult result = Ringctl({"watch", "job-000003", "--output", "json"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::vector<nlohmann::json> lines = JsonLines(result.output);
  ASSERT_EQ(lines.size(), 6u) << result.output;  // 3 state changes, 3 steps
  EXPECT_EQ(lines[0]["event"], "state");
  EXPECT_EQ(lines[0]["from"], "QUEUED");
  EXPECT_EQ(lines[0]["to"], "ASSIGNED");
  EXPECT_EQ(lines[0]["time"], "2024-05-01T12:00:02Z");
  EXPECT_EQ(lines[2]["event"], "step");
  EXPECT_EQ(lines[2]["step"], 1);
  EXPECT_EQ(lines[2]["record"]["ranks"][0]["bytes_sent"], 10);
  // The text, not just the value: the record's own digits, verbatim.
  EXPECT_TRUE(Has(result.output, "\"loss\":6.7041950225830078,")) << result.output;
  EXPECT_TRUE(Has(result.output, "\"lr\":0.00029999999999999997,")) << result.output;
  EXPECT_TRUE(Has(result.output, "\"record\":{\"step\": 3, \"loss\": 4.7041950225830078,"))
      << result.output;
  EXPECT_EQ(lines[2]["loss"].get<double>(), 6.7041950225830078);
  EXPECT_EQ(lines[4]["tokens_per_second"].get<double>(), 1234.5);  // not in the record
}

TEST_F(RingctlServiceTest, WatchResumesABrokenStreamAfterTheLastStep) {
  const CommandResult result = Ringctl({"watch", "job-000004"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(service_.watch_from_steps("job-000004"), (std::vector<int64_t>{0, 3}));
  for (const char* part :
       {"step 1/3  loss", "step 2/3  loss", "step 3/3  loss", "step 4/3  loss"}) {
    const size_t first = result.output.find(part);
    EXPECT_NE(first, std::string::npos) << part << " in\n" << result.output;
    EXPECT_EQ(result.output.find(part, first + 1), std::string::npos) << part << " twice";
  }
  const size_t first = result.output.find("ASSIGNED → RUNNING");
  EXPECT_EQ(result.output.find("ASSIGNED → RUNNING", first + 1), std::string::npos)
      << "state change printed twice:\n"
      << result.output;
}

TEST_F(RingctlServiceTest, CancelPrintsTheStateAndRejectsUnknownJobs) {
  const CommandResult result = Ringctl({"cancel", "job-000001"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Has(result.output, "job-000001: CANCELLED")) << result.output;
  const CommandResult unknown = Ringctl({"cancel", "job-424242"});
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_TRUE(Has(unknown.output,
                  "ringctl cancel: coordinator at " + address_ + ": unknown job job-424242"))
      << unknown.output;
  EXPECT_TRUE(Has(unknown.output, "ringctl list")) << unknown.output;
  // A finished job: nothing to cancel, said so, and not an error.
  const CommandResult finished = Ringctl({"cancel", "job-000003"});
  EXPECT_EQ(finished.exit_code, 0) << finished.output;
  EXPECT_TRUE(Has(finished.output, "job-000003 already finished: SUCCEEDED (nothing to cancel)"))
      << finished.output;
}

TEST_F(RingctlServiceTest, LossCompareRunsBothSidesAsJobs) {
  const std::string config = dir_ / "job.toml";
  WriteFile(config, "[training]\n");
  const std::string out = dir_ / "out";
  const CommandResult result =
      Ringctl({"loss-compare", "--baseline-config=" + config, "--steps=3", "--assert-equal",
               "--output-folder=" + out, "--test-options=--parallelism.context_parallel_degree=4"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(Has(result.output, "PASS: all 3 steps bitwise equal")) << result.output;
  const std::vector<v1::SubmitJobRequest> submits = service_.submits();
  ASSERT_EQ(submits.size(), 2u);
  EXPECT_EQ(submits[0].name(), "loss-compare-baseline");
  EXPECT_EQ(std::vector<std::string>(submits[1].overrides().begin(), submits[1].overrides().end()),
            (std::vector<std::string>{"parallelism.context_parallel_degree=4", "training.steps=3",
                                      "checkpoint.enable=false", "training.seed=42"}));
  const nlohmann::json summary = nlohmann::json::parse(ReadFile(out + "/summary.json"));
  EXPECT_EQ(summary["passed"], true);
  EXPECT_EQ(summary["test"]["job_id"], "job-000008");
  EXPECT_EQ(summary["per_step"][0]["baseline_loss"].get<double>(), 6.7041950225830078);
  EXPECT_TRUE(Has(ReadFile(out + "/baseline.jsonl"), "\"loss\": 6.7041950225830078"));
  EXPECT_TRUE(Has(ReadFile(out + "/test.log"), "RUNNING → SUCCEEDED"));

  const CommandResult nproc =
      Ringctl({"loss-compare", "--baseline-config=" + config, "--steps=3", "--test-nproc=4"});
  EXPECT_EQ(nproc.exit_code, 2) << nproc.output;
  EXPECT_TRUE(Has(nproc.output, "--test-nproc=4: with --coordinator the world size"))
      << nproc.output;
}

// Every global flag (--coordinator, --tls-ca, --tls-cert, --tls-key, --token-file) is taken before
// the subcommand as after it, and beats its variable wherever it stands. A CA file that does not
// exist shows which one ringctl took.
TEST_F(RingctlServiceTest, GlobalFlagsGoBeforeTheSubcommandAndBeatTheirVariables) {
  const std::string flag_ca = dir_ / "flag-ca.crt";
  const std::string env = "RINGTRAIN_TLS_CA=" + (dir_ / "env-ca.crt");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--tls-ca", flag_ca, "list"},
        {"list", "--tls-ca", flag_ca},
        {"--tls-ca=" + flag_ca, "--tls-cert", "c", "--tls-key", "k", "list"}}) {
    const CommandResult result = Ringctl(args, {env});
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_TRUE(Has(result.output, "--tls-ca " + flag_ca + ": cannot read it")) << result.output;
  }
  const CommandResult from_env = Ringctl({"list"}, {env});
  EXPECT_TRUE(Has(from_env.output, "env-ca.crt: cannot read it")) << from_env.output;
  // Given twice, the one after the subcommand wins (Ringctl adds --coordinator at the end).
  const CommandResult twice = Ringctl({"--coordinator", "192.0.2.1:1", "list"});
  EXPECT_EQ(twice.exit_code, 0) << twice.output;
}

// A token goes in cleartext only to a loopback address, with one warning; anywhere else ringctl
// refuses before connecting, naming where the token came from and what would work.
TEST_F(RingctlServiceTest, ATokenGoesInCleartextOnlyToLoopback) {
  const std::string token = dir_ / "token";
  WriteFile(token, "client-secret\n");
  const CommandResult loopback = Ringctl({"--token-file", token, "list"});
  EXPECT_EQ(loopback.exit_code, 0) << loopback.output;
  EXPECT_EQ(service_.list_authorization(), "Bearer client-secret");
  const std::string warning =
      "warning: sending the token of --token-file " + token + " in cleartext to " + address_;
  EXPECT_TRUE(Has(loopback.output, warning)) << loopback.output;
  EXPECT_EQ(loopback.output.find(warning), loopback.output.rfind(warning)) << loopback.output;

  const std::string ringctl = BinDir() + "/ringctl";
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{ringctl, "list", "--coordinator", "192.0.2.1:50051",
                                 "--token-file", token},
        {"/usr/bin/env", "RINGTRAIN_COORDINATOR=coordinator.example.com:50051",
         "RINGTRAIN_TOKEN=env-secret", ringctl, "ranks", "job-000001"}}) {
    const CommandResult refused = RunCommand(argv);
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_TRUE(Has(refused.output, "refusing to send the token of ")) << refused.output;
    EXPECT_TRUE(Has(refused.output, "Give --tls-ca FILE")) << refused.output;
    EXPECT_TRUE(Has(refused.output, "loopback address (127.0.0.1")) << refused.output;
    EXPECT_FALSE(Has(refused.output, "secret")) << refused.output;
  }
}

// `ringctl up` with stand-ins for the two binaries (shell scripts that log their argv and pid) and
// the fake JobService above in place of the real coordinator's.
class RingctlUpTest : public RingctlServiceTest {
 protected:
  void WriteFakes(const std::string& coordinator_body, const std::string& worker_body) {
    std::filesystem::create_directories(bin_);
    for (const auto& [name, body] : {std::pair{"ringtrain-coordinator", coordinator_body},
                                     {"ringtrain-worker", worker_body}}) {
      const std::string path = bin_ + "/" + name;
      WriteFile(path, "#!/bin/sh\necho \"" + std::string(name) + " $*\" >> " + bin_ +
                          "/calls.txt\necho $$ >> " + bin_ + "/pids.txt\n" + body + "\n");
      std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    }
  }

  // Nothing listens until the stand-in coordinator has started (as with the real one).
  void SetUp() override { address_ = "127.0.0.1:" + std::to_string(FreePort()); }

  // Starts `ringctl up`, then the fake service once the stand-in coordinator runs.
  Subprocess StartUp(int workers) {
    Subprocess up = StartCommand({BinDir() + "/ringctl", "up", "--workers", std::to_string(workers),
                                  "--listen", address_, "--bin-dir", bin_, "--dir", cluster_},
                                 out_);
    WaitFor([&] { return Has(ReadFile(bin_ + "/calls.txt"), "ringtrain-coordinator"); });
    StartServer();
    return up;
  }

  // Waits up to 20 s for `text` in ringctl's output (or in the file at `path`).
  bool WaitForOutput(const std::string& text, const std::string& path = "") {
    return WaitFor([&] { return Has(ReadFile(path.empty() ? out_ : path), text); }, 20);
  }

  // Every process a stand-in started has been stopped and reaped.
  void ExpectAllStopped() {
    std::istringstream pids(ReadFile(bin_ + "/pids.txt"));
    int count = 0;
    for (pid_t pid; pids >> pid; ++count) {
      EXPECT_NE(kill(pid, 0), 0) << "pid " << pid << " still exists";
    }
    EXPECT_GT(count, 0);
  }

  const std::string bin_ = dir_ / "bin";
  const std::string cluster_ = dir_ / "cluster";
  const std::string out_ = dir_ / "up.out";
};

TEST_F(RingctlUpTest, StartsTheClusterAndStopsItOnSigterm) {
  WriteFakes("exec sleep 600", "exec sleep 600");
  Subprocess up = StartUp(1);
  ASSERT_TRUE(WaitForOutput("cluster up: coordinator at " + address_ + ", 1 worker"))
      << ReadFile(out_);
  ASSERT_TRUE(
      WaitForOutput("ringtrain-worker", bin_ + "/calls.txt"));  // the fake said idle already
  const std::string calls = ReadFile(bin_ + "/calls.txt");
  EXPECT_TRUE(Has(
      calls, "ringtrain-coordinator --listen " + address_ + " --db " + cluster_ + "/ringtrain.db"))
      << calls;
  EXPECT_TRUE(Has(calls, "ringtrain-worker --coordinator " + address_ +
                             " --worker-id worker-0 --host-label local --advertise-address "
                             "127.0.0.1 --work-dir " +
                             cluster_ + "/worker-0 --threads 1"))
      << calls;
  EXPECT_TRUE(std::filesystem::exists(cluster_ + "/logs/worker-0.log"));
  up.Signal(SIGTERM);
  EXPECT_EQ(WaitCommand(up, 20), 0) << ReadFile(out_);
  EXPECT_TRUE(Has(ReadFile(out_), "cluster stopped")) << ReadFile(out_);
  ExpectAllStopped();
}

TEST_F(RingctlUpTest, AWorkerDyingDuringStartUpFailsWithItsLog) {
  WriteFakes("exec sleep 600", "echo 'cannot register: boom' >&2; exit 4");
  Subprocess up = StartUp(2);  // the fake lists one idle worker: it waits, and sees the deaths
  EXPECT_EQ(WaitCommand(up, 30), 1) << ReadFile(out_);
  const std::string output = ReadFile(out_);
  EXPECT_TRUE(Has(output, "exited (exit status 4)")) << output;
  EXPECT_TRUE(Has(output, "    cannot register: boom")) << output;
  ExpectAllStopped();
}

TEST_F(RingctlUpTest, TheCoordinatorDyingStopsTheCluster) {
  WriteFakes("sleep 2; echo 'fatal: disk full' >&2; exit 5", "exec sleep 600");
  Subprocess up = StartUp(1);
  EXPECT_EQ(WaitCommand(up, 30), 1) << ReadFile(out_);
  const std::string output = ReadFile(out_);
  EXPECT_TRUE(Has(output, "cluster up:")) << output;
  EXPECT_TRUE(Has(output, "coordinator exited (exit status 5)")) << output;
  EXPECT_TRUE(Has(output, "fatal: disk full")) << output;
  ExpectAllStopped();
}

TEST_F(RingctlUpTest, AnotherCoordinatorOnTheAddressIsAUsageError) {
  WriteFakes("exec sleep 600", "exec sleep 600");
  StartServer();
  const CommandResult result =
      RunCommand({BinDir() + "/ringctl", "up", "--workers", "1", "--listen", address_, "--bin-dir",
                  bin_, "--dir", cluster_});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_TRUE(Has(result.output, "a coordinator already answers at " + address_)) << result.output;
  EXPECT_FALSE(std::filesystem::exists(bin_ + "/calls.txt"));
}

TEST_F(RingctlUpTest, MissingBinariesAreAUsageError) {
  const CommandResult result = RunCommand(
      {BinDir() + "/ringctl", "up", "--workers", "1", "--bin-dir", bin_, "--dir", cluster_});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_TRUE(Has(result.output, "ringtrain-coordinator not found at " + bin_)) << result.output;
  EXPECT_TRUE(Has(result.output, "ringtrain-worker not found")) << result.output;
}

TEST(RingctlUnreachableTest, NothingListeningExitsThreeWithinSeconds) {
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  for (const std::vector<std::string>& args : {std::vector<std::string>{"list"},
                                               {"get", "job-000001"},
                                               {"watch", "job-000001"},
                                               {"cancel", "job-000001"},
                                               {"workers"}}) {
    std::vector<std::string> argv = {BinDir() + "/ringctl"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("--coordinator=" + address);
    const auto start = std::chrono::steady_clock::now();
    const CommandResult result = RunCommand(argv);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(result.exit_code, 3) << args[0] << ": " << result.output;
    EXPECT_TRUE(Has(result.output, "cannot reach coordinator at " + address))
        << args[0] << ": " << result.output;
    EXPECT_LT(seconds, 6.0) << args[0];
  }
}

}  // namespace
}  // namespace ringtrain::testing
