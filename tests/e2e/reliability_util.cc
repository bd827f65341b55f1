#include "tests/e2e/reliability_util.h"

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace ringtrain::testing {

std::vector<std::map<std::string, std::string>> LastRunRecords(const LocalCluster& cluster,
                                                               const std::string& job_id,
                                                               int workers) {
  for (int i = 0; i < workers; ++i) {
    const std::string path = cluster.work_dir(i) + "/" + job_id + "/rank-0/metrics.jsonl";
    if (!std::filesystem::exists(path)) continue;
    std::vector<std::map<std::string, std::string>> records = ReadJsonl(path);
    if (!records.empty() && records.front()["step"] != "1") return records;
  }
  return {};
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The debug config as a job of kSteps steps on a dp × cp mesh that checkpoints every 5 steps and
// may restart `max_restarts` times after 1 s.
std::vector<std::string> Restartable(int dp, int cp, int max_restarts, double comm_timeout) {
  return {"parallelism.data_parallel_replicate_degree=" + std::to_string(dp),
          "parallelism.context_parallel_degree=" + std::to_string(cp),
          "training.steps=" + std::to_string(kSteps),
          "lr_scheduler.warmup_steps=5",
          "metrics.log_freq=1000",
          "checkpoint.enable=true",
          "checkpoint.interval=5",
          "job.max_restarts=" + std::to_string(max_restarts),
          "job.restart_backoff_seconds=1",
          "comm.timeout_seconds=" + absl::StrCat(comm_timeout)};
}

// The uninterrupted run: the same config through ringtrain-run (checkpoints off), its records by
// step (1-based index 0..kSteps-1).
std::vector<std::map<std::string, std::string>> Uninterrupted(const LocalCluster& cluster,
                                                              int nproc,
                                                              const std::vector<std::string>& job) {
  const std::string out = cluster.dir() / "uninterrupted.jsonl";
  std::vector<std::string> run = {BinDir() + "/ringtrain-run", "--nproc", std::to_string(nproc),
                                  ConfigPath("debug_model.toml")};
  for (const std::string& o : job) run.push_back("--" + o);
  run.push_back("--checkpoint.enable=false");
  run.push_back("--metrics.jsonl=" + out);
  CommandResult result = RunCommand(run);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return ReadJsonl(out);
}

// Every stored step record of the job (WatchJob replays them once each, in order).
std::vector<std::string> StoredRecords(LocalCluster& cluster, const std::string& job_id) {
  grpc::Status status;
  std::vector<std::string> records;
  for (const v1::JobEvent& e : cluster.Watch(job_id, 0, 30, &status)) {
    if (e.has_step()) records.push_back(e.step().record_json());
  }
  EXPECT_TRUE(status.ok()) << status.error_message();
  return records;
}

// Every step stored once, in order, and each loss bitwise the uninterrupted run's; the last run's
// own records (the recomputed steps too) likewise. Returns the step the last run resumed after.
int ExpectBitwiseResume(LocalCluster& cluster, const std::string& job_id, int workers,
                        const std::vector<std::map<std::string, std::string>>& expected) {
  const std::vector<std::string> stored = StoredRecords(cluster, job_id);
  EXPECT_EQ(stored.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(expected.size(), static_cast<size_t>(kSteps));
  for (size_t i = 0; i < stored.size() && i < expected.size(); ++i) {
    EXPECT_EQ(RawField(stored[i], "step"), std::to_string(i + 1));
    EXPECT_EQ(RawField(stored[i], "loss"), expected[i].at("loss")) << "step " << i + 1;
  }
  std::vector<std::map<std::string, std::string>> last = LastRunRecords(cluster, job_id, workers);
  EXPECT_FALSE(last.empty()) << "no restarted run's records found";
  if (last.empty()) return 0;
  const int resumed_after = std::stoi(last.front()["step"]) - 1;
  EXPECT_EQ(last.size(), static_cast<size_t>(kSteps - resumed_after));
  for (auto& record : last) {
    const int step = std::stoi(record["step"]);
    EXPECT_EQ(record["loss"], expected.at(step - 1).at("loss")) << "resumed run, step " << step;
  }
  return resumed_after;
}

RecoveryTimes WatchRecovery(LocalCluster& cluster, const std::string& job_id, int64_t step,
                            Clock::time_point start, double timeout) {
  RecoveryTimes t;
  cluster.WaitForJob(
      job_id,
      [&](const v1::Job& j) {
        const double now = SecondsSince(start);
        if (t.detected < 0 && j.state() == v1::JOB_STATE_RESTARTING) t.detected = now;
        if (t.detected >= 0 && t.running < 0 && j.state() == v1::JOB_STATE_RUNNING) t.running = now;
        if (t.running >= 0 && t.training < 0 && j.last_step() > step) t.training = now;
        return t.training >= 0 || IsFinal(j);
      },
      timeout, "training again after the failure");
  return t;
}

void PrintRecovery(const char* what, const RecoveryTimes& t, int64_t failed_at, int resumed_after) {
  std::printf(
      "%s: RESTARTING after %.2f s, RUNNING again after %.2f s, training (past step %lld) "
      "after %.2f s; steps recomputed %lld (failed at step %lld, resumed after %d)\n",
      what, t.detected, t.running, static_cast<long long>(failed_at), t.training,
      static_cast<long long>(failed_at - resumed_after), static_cast<long long>(failed_at),
      resumed_after);
}

Underway SubmitAndRunTo(LocalCluster& cluster, const std::vector<std::string>& overrides, int rank,
                        int64_t step) {
  Underway u;
  u.job = cluster.Submit(ConfigPath("debug_model.toml"), overrides);
  if (!cluster.WaitForJob(
          u.job.job_id(), [&](const v1::Job& j) { return j.last_step() >= step; }, 180,
          "step " + std::to_string(step))) {
    return u;
  }
  u.trainer = cluster.TrainerPid(u.job.job_id(), rank);
  u.step = cluster.Get(u.job.job_id()).last_step();
  if (u.trainer <= 0) ADD_FAILURE() << "no trainer of rank " << rank << "\n" << cluster.Logs();
  return u;
}

bool StepsOnOrEnds(LocalCluster& cluster, const std::string& job_id, int64_t seen) {
  return cluster.WaitForJob(
      job_id,
      [&](const v1::Job& j) {
        return j.last_step() > seen || j.state() == v1::JOB_STATE_SUCCEEDED;
      },
      60, "a step after step " + std::to_string(seen) + ", or the job's end");
}

// The job once it has ended, after a test failure unless it SUCCEEDED.
v1::Job Succeeded(LocalCluster& cluster, const std::string& job_id) {
  cluster.WaitForJob(job_id, IsFinal, 240, "end");
  const v1::Job done = cluster.Get(job_id);
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.ShortDebugString() << cluster.Logs();
  return done;
}

std::unique_ptr<LocalCluster> ReliabilityTest::Start(int workers,
                                                     std::vector<std::string> coordinator,
                                                     std::vector<std::string> agent,
                                                     Protection protection, StartOrder order) {
  coordinator.push_back("--worker-timeout=4");
  agent.push_back("--checkpoint-root=" + checkpoints_.path());
  return std::make_unique<LocalCluster>(workers, coordinator, agent, protection, order);
}

}  // namespace ringtrain::testing
