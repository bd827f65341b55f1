// The service end to end on 127.0.0.1: a real coordinator, four real agents and real trainers.
// Each TEST starts its own cluster (see local_cluster.h); timing bounds are the issue's, with the
// time measured printed so the CI log shows the margin.
#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/local_cluster.h"

namespace ringtrain::testing {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<std::string> StepRecords(const std::vector<v1::JobEvent>& events) {
  std::vector<std::string> records;
  for (const v1::JobEvent& e : events) {
    if (e.has_step()) records.push_back(e.step().record_json());
  }
  return records;
}

// Overrides that make the debug config a job of `steps` steps on a dp × cp mesh.
std::vector<std::string> Mesh(int dp, int cp, int steps) {
  return {"parallelism.data_parallel_replicate_degree=" + std::to_string(dp),
          "parallelism.context_parallel_degree=" + std::to_string(cp),
          "training.steps=" + std::to_string(steps),
          "lr_scheduler.warmup_steps=" + std::to_string(std::min(10, steps / 2)),
          "metrics.log_freq=1000"};
}

TEST(ServiceTest, Cp4JobMatchesRingtrainRunAndTheQueueDrainsInOrder) {
  LocalCluster cluster(4);
  const std::string config = ConfigPath("debug_model.toml");
  const Clock::time_point submitted = Clock::now();
  v1::Job cp4 = cluster.Submit(config, Mesh(1, 4, 20));
  ASSERT_FALSE(cp4.job_id().empty());
  EXPECT_EQ(cp4.world_size(), 4);
  // Two 2-rank jobs submitted meanwhile wait (FIFO, no free worker), then run side by side.
  v1::Job a = cluster.Submit(config, Mesh(1, 2, 3));
  v1::Job b = cluster.Submit(config, Mesh(2, 1, 3));
  EXPECT_EQ(a.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(a.wait_reason(), "waiting for 2 idle cpu workers, 0 free");
  EXPECT_EQ(b.state(), v1::JOB_STATE_QUEUED);

  ASSERT_TRUE(cluster.WaitForJob(
      cp4.job_id(), [](const v1::Job& j) { return j.last_step() >= 1; }, 120, "first step"));
  std::printf("submit -> first step of a cp=4 job: %.2f s\n", SecondsSince(submitted));
  ASSERT_TRUE(cluster.WaitForJob(cp4.job_id(), IsFinal, 180, "end"));
  const double service_seconds = SecondsSince(submitted);
  EXPECT_EQ(cluster.Get(cp4.job_id()).state(), v1::JOB_STATE_SUCCEEDED) << cluster.Logs();

  // a and b overlap in time on disjoint workers.
  ASSERT_TRUE(cluster.WaitForJob(
      b.job_id(), [](const v1::Job& j) { return !j.mesh().empty(); }, 30, "placement"));
  std::set<std::string> used;
  for (const v1::Job& j : {cluster.Get(a.job_id()), cluster.Get(b.job_id())}) {
    EXPECT_NE(j.state(), v1::JOB_STATE_QUEUED);
    for (const auto& p : j.mesh()) used.insert(p.worker_id());
  }
  EXPECT_EQ(used.size(), 4u) << "the two 2-rank jobs must run on disjoint workers";
  ASSERT_TRUE(cluster.WaitForJob(a.job_id(), IsFinal, 120, "end"));
  ASSERT_TRUE(cluster.WaitForJob(b.job_id(), IsFinal, 120, "end"));
  EXPECT_EQ(cluster.Get(a.job_id()).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(cluster.Get(b.job_id()).state(), v1::JOB_STATE_SUCCEEDED);

  // The same job through ringtrain-run: the same losses, bit for bit.
  std::vector<std::string> run = {BinDir() + "/ringtrain-run", "--nproc", "4", config};
  for (const std::string& o : Mesh(1, 4, 20)) run.push_back("--" + o);
  run.push_back("--metrics.jsonl=" + (cluster.dir() / "run.jsonl"));
  const Clock::time_point run_start = Clock::now();
  CommandResult local = RunCommand(run);
  ASSERT_EQ(local.exit_code, 0) << local.output;
  std::printf("cp=4, 20 steps: through the service %.2f s (submit to end), ringtrain-run %.2f s\n",
              service_seconds, SecondsSince(run_start));
  std::vector<std::map<std::string, std::string>> expected = ReadJsonl(cluster.dir() / "run.jsonl");

  // Replay after the end: all 20 steps, then the final state.
  grpc::Status status;
  std::vector<v1::JobEvent> events = cluster.Watch(cp4.job_id(), 0, 30, &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<std::string> records = StepRecords(events);
  ASSERT_EQ(records.size(), 20u);
  ASSERT_EQ(expected.size(), 20u);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(RawField(records[i], "step"), std::to_string(i + 1));
    EXPECT_EQ(RawField(records[i], "loss"), expected[i]["loss"]) << "step " << i + 1;
  }
  EXPECT_EQ(events.back().state_change().to_state(), v1::JOB_STATE_SUCCEEDED);
  // Step time, mean over steps 6..20 (the first steps include warm-up).
  double service_step = 0, run_step = 0;
  for (size_t i = 5; i < records.size(); ++i) {
    service_step += std::stod(RawField(records[i], "step_seconds")) / (records.size() - 5);
    run_step += std::stod(expected[i]["step_seconds"]) / (records.size() - 5);
  }
  std::printf("cp=4 mean step time, steps 6-20: service %.4f s, ringtrain-run %.4f s\n",
              service_step, run_step);

  // ringctl replays it too, from a given step.
  CommandResult watch = RunCommand({BinDir() + "/ringctl", "watch", cp4.job_id(), "--coordinator",
                                    cluster.address(), "--from-step", "15", "--output", "json"});
  EXPECT_EQ(watch.exit_code, 0) << watch.output;
  EXPECT_THAT(watch.output, HasSubstr("\"step\":15"));
  EXPECT_THAT(watch.output, HasSubstr("\"step\":20"));
  EXPECT_THAT(watch.output, ::testing::Not(HasSubstr("\"step\":14,")));

  // A restarted coordinator still lists the job and replays its steps; the agents come back.
  cluster.RestartCoordinator();
  ASSERT_TRUE(cluster.WaitForIdleWorkers(4, 30)) << cluster.Logs();
  EXPECT_EQ(cluster.Get(cp4.job_id()).state(), v1::JOB_STATE_SUCCEEDED);
  std::vector<std::string> replayed = StepRecords(cluster.Watch(cp4.job_id(), 0, 30, &status));
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(replayed, records);
  CommandResult list = RunCommand(
      {BinDir() + "/ringctl", "list", "--coordinator", cluster.address(), "--output", "json"});
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_THAT(list.output, HasSubstr(cp4.job_id()));
}

TEST(ServiceTest, CancelEndsARunningJobWithinFiveSeconds) {
  LocalCluster cluster(4);
  v1::Job job = cluster.Submit(ConfigPath("debug_model.toml"), Mesh(1, 4, 1000));
  ASSERT_TRUE(cluster.WaitForJob(
      job.job_id(), [](const v1::Job& j) { return j.last_step() >= 2; }, 120, "second step"));
  const Clock::time_point start = Clock::now();
  CommandResult cancel = RunCommand(
      {BinDir() + "/ringctl", "cancel", job.job_id(), "--coordinator", cluster.address()});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.output;
  ASSERT_TRUE(cluster.WaitForIdleWorkers(4, 5)) << cluster.Logs();
  const double seconds = SecondsSince(start);
  std::printf("cancel -> every worker idle: %.2f s\n", seconds);
  v1::Job cancelled = cluster.Get(job.job_id());
  EXPECT_EQ(cancelled.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_LT(cancelled.last_step(), 1000);
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(cluster.TrainerPid(job.job_id(), rank), -1);
}

TEST(ServiceTest, KilledTrainerFailsTheJobNamingRankAndWorker) {
  LocalCluster cluster(4);
  v1::Job job = cluster.Submit(ConfigPath("debug_model.toml"), Mesh(1, 4, 1000));
  ASSERT_TRUE(cluster.WaitForJob(
      job.job_id(), [](const v1::Job& j) { return j.last_step() >= 1; }, 120, "first step"));
  // A survivor writing to the dead rank's socket must get EPIPE (an error that ends it with exit
  // 3, a symptom), never die of SIGPIPE and be taken for the cause: every trainer ignores it.
  for (int rank = 0; rank < 4; ++rank) {
    const pid_t pid = cluster.TrainerPid(job.job_id(), rank);
    ASSERT_GT(pid, 0) << "rank " << rank;
    EXPECT_TRUE(IgnoresSignal(pid, SIGPIPE)) << "rank " << rank << "'s trainer (pid " << pid << ")";
  }
  const pid_t victim = cluster.TrainerPid(job.job_id(), 2);
  ASSERT_GT(victim, 0);
  const Clock::time_point start = Clock::now();
  kill(victim, SIGKILL);
  // comm.timeout_seconds of the debug config is 60 s; the bound is that + 10 s.
  ASSERT_TRUE(cluster.WaitForJob(job.job_id(), IsFinal, 70, "end after the kill"));
  std::printf("trainer SIGKILLed -> job FAILED: %.2f s\n", SecondsSince(start));
  v1::Job failed = cluster.Get(job.job_id());
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed.error().rank(), 2);
  std::string worker_of_rank2;
  for (const auto& p : failed.mesh()) {
    if (p.rank() == 2) worker_of_rank2 = p.worker_id();
  }
  EXPECT_EQ(failed.error().worker_id(), worker_of_rank2);
  EXPECT_EQ(failed.error().exit_status(), 128 + SIGKILL);
  EXPECT_THAT(failed.error().message(), HasSubstr("rank 2 on " + worker_of_rank2));
  EXPECT_THAT(failed.error().message(), HasSubstr("killed by signal 9"));
  EXPECT_TRUE(cluster.WaitForIdleWorkers(4, 15)) << cluster.Logs();

  CommandResult get = RunCommand(
      {BinDir() + "/ringctl", "get", failed.job_id(), "--coordinator", cluster.address()});
  EXPECT_THAT(get.output, HasSubstr("FAILED"));
  EXPECT_THAT(get.output, HasSubstr(worker_of_rank2));
}

// Each agent reports its device at Register; ListWorkers and `ringctl workers` show it. On the CPU
// that is the model name and MemTotal, read here from /proc independently of the agent.
TEST(ServiceTest, WorkersShowTheirDeviceNameAndMemory) {
  LocalCluster cluster(1);
  std::string model;
  for (absl::string_view line : absl::StrSplit(ReadFile("/proc/cpuinfo"), '\n')) {
    if (absl::StartsWith(line, "model name")) {
      model = std::string(absl::StripAsciiWhitespace(line.substr(line.find(':') + 1)));
      break;
    }
  }
  uint64_t mem_total_kib = 0;
  ASSERT_EQ(
      std::sscanf(ReadFile("/proc/meminfo").c_str(), "MemTotal: %" SCNu64 " kB", &mem_total_kib),
      1);
  const std::vector<v1::Worker> workers = cluster.Workers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].device(), "cpu");
  if (!model.empty()) {
    EXPECT_EQ(workers[0].device_name(), model);
  }
  EXPECT_EQ(workers[0].device_memory_bytes(), mem_total_kib * 1024);

  CommandResult table =
      RunCommand({BinDir() + "/ringctl", "workers", "--coordinator", cluster.address()});
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_THAT(table.output, HasSubstr("DEVICE"));
  EXPECT_THAT(table.output, HasSubstr("MEMORY"));
  EXPECT_THAT(table.output, HasSubstr("cpu " + workers[0].device_name()));
  EXPECT_THAT(table.output, HasSubstr(" GiB")) << "MemTotal of any test machine is GiB";
  CommandResult json = RunCommand(
      {BinDir() + "/ringctl", "workers", "--coordinator", cluster.address(), "--output", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_THAT(json.output,
              HasSubstr(absl::StrCat("\"device_memory_bytes\":\"", mem_total_kib * 1024, "\"")));
}

TEST(ServiceTest, BadRequestsGetClearErrorsAndTheCoordinatorKeepsServing) {
  LocalCluster cluster(2);
  auto submit = [&](const std::string& toml, const std::vector<std::string>& overrides) {
    v1::SubmitJobRequest request;
    request.set_config_toml(toml);
    for (const std::string& o : overrides) request.add_overrides(o);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::Job job;
    return cluster.stub().SubmitJob(&context, request, &job);
  };
  const std::string config = ReadFile(ConfigPath("debug_model.toml"));
  grpc::Status garbage = submit("this is [not toml", {});
  EXPECT_EQ(garbage.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::Status bad_value = submit(config, {"optimizer.lr=-1"});
  EXPECT_EQ(bad_value.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad_value.error_message(), HasSubstr("optimizer.lr"));
  grpc::Status too_big = submit(config, {"parallelism.context_parallel_degree=8"});
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(too_big.error_message(), HasSubstr("needs 8 cpu workers but the pool has 2"));

  v1::GetJobRequest get;
  get.set_job_id("job-424242");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::Job job;
  grpc::Status unknown = cluster.stub().GetJob(&context, get, &job);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown.error_message(), HasSubstr("job-424242"));
  grpc::Status watch_status;
  cluster.Watch("job-424242", 0, 10, &watch_status);
  EXPECT_EQ(watch_status.error_code(), grpc::StatusCode::NOT_FOUND);
  CommandResult cancel = RunCommand(
      {BinDir() + "/ringctl", "cancel", "job-424242", "--coordinator", cluster.address()});
  EXPECT_NE(cancel.exit_code, 0);
  EXPECT_THAT(cancel.output, HasSubstr("job-424242"));
  CommandResult submit_cli =
      RunCommand({BinDir() + "/ringctl", "submit", ConfigPath("debug_model.toml"), "--coordinator",
                  cluster.address(), "--parallelism.context_parallel_degree=8"});
  EXPECT_NE(submit_cli.exit_code, 0);
  EXPECT_THAT(submit_cli.output, HasSubstr("needs 8 cpu workers"));

  // Still serving: the standard health service says so, and a small job runs to the end.
  {
    grpc::GenericStub generic(
        grpc::CreateChannel(cluster.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;  // HealthCheckRequest{service: ""}
    std::promise<grpc::Status> done;
    generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                      &response, [&done](grpc::Status s) { done.set_value(s); });
    grpc::Status health = done.get_future().get();
    ASSERT_TRUE(health.ok()) << health.error_message();
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(response.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // status (field 1) = SERVING (1)
  }
  v1::Job ok = cluster.Submit(ConfigPath("debug_model.toml"), Mesh(1, 2, 2));
  ASSERT_TRUE(cluster.WaitForJob(ok.job_id(), IsFinal, 120, "end"));
  EXPECT_EQ(cluster.Get(ok.job_id()).state(), v1::JOB_STATE_SUCCEEDED) << cluster.Logs();

  // Nothing listening: a clear error, quickly.
  const std::string nowhere = "127.0.0.1:" + std::to_string(FreePort());
  const Clock::time_point start = Clock::now();
  CommandResult unreachable = RunCommand({BinDir() + "/ringctl", "list", "--coordinator", nowhere});
  EXPECT_LT(SecondsSince(start), 15);
  EXPECT_NE(unreachable.exit_code, 0);
  EXPECT_THAT(unreachable.output, HasSubstr("cannot reach coordinator at " + nowhere));
}

}  // namespace
}  // namespace ringtrain::testing

namespace ringtrain::testing {
namespace {

TEST(ServiceTest, LossCompareRunsBothSidesAsJobs) {
  LocalCluster cluster(2);
  CommandResult compare = RunCommand(
      {BinDir() + "/ringctl", "loss-compare", "--coordinator", cluster.address(),
       "--baseline-config", ConfigPath("debug_model.toml"), "--steps", "5",
       "--baseline-options=--lr_scheduler.warmup_steps=2 --metrics.log_freq=1000",
       "--test-options=--parallelism.context_parallel_degree=2 --lr_scheduler.warmup_steps=2 "
       "--metrics.log_freq=1000",
       "--atol", "1e-5", "--rtol", "0", "--output-folder", cluster.dir() / "compare"});
  EXPECT_EQ(compare.exit_code, 0) << compare.output << cluster.Logs();
  EXPECT_THAT(compare.output, HasSubstr("PASS"));
  // Both sides ran on the cluster: two jobs, each 5 steps, the second on 2 ranks.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(cluster.stub().ListJobs(&context, v1::ListJobsRequest(), &jobs).ok());
  ASSERT_EQ(jobs.jobs_size(), 2);
  std::multiset<int> worlds;
  for (const v1::Job& job : jobs.jobs()) {
    EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
    EXPECT_EQ(job.last_step(), 5);
    worlds.insert(job.world_size());
  }
  EXPECT_EQ(worlds, (std::multiset<int>{1, 2}));
}

}  // namespace
}  // namespace ringtrain::testing

namespace ringtrain::testing {
namespace {

TEST(ServiceTest, RunningJobSurvivesACoordinatorRestart) {
  LocalCluster cluster(2);
  v1::Job job = cluster.Submit(ConfigPath("debug_model.toml"), Mesh(1, 2, 40));
  ASSERT_TRUE(cluster.WaitForJob(
      job.job_id(), [](const v1::Job& j) { return j.last_step() >= 5; }, 120, "step 5"));
  cluster.RestartCoordinator();
  // The agents come back under their old ids, naming the rank they still run.
  for (int i = 0; i < 300 && cluster.Workers().size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(cluster.Workers().size(), 2u) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitForJob(job.job_id(), IsFinal, 120, "end"));
  v1::Job done = cluster.Get(job.job_id());
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.error().message() << cluster.Logs();
  // Every step is in the history, including those reported while the coordinator was down.
  grpc::Status status;
  std::vector<std::string> records = StepRecords(cluster.Watch(job.job_id(), 0, 30, &status));
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(records.size(), 40u);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(RawField(records[i], "step"), std::to_string(i + 1));
  }
  for (const v1::Worker& w : cluster.Workers()) {
    EXPECT_TRUE(w.worker_id() == done.mesh(0).worker_id() ||
                w.worker_id() == done.mesh(1).worker_id())
        << w.worker_id() << " is not a name from the job's mesh";
  }
}

}  // namespace
}  // namespace ringtrain::testing
