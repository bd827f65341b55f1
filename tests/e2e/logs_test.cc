// `ringctl logs` and `ringctl top` against a real local cluster: the log of a running rank, of a
// finished one (followed live to its end), of a crashed one (killed, and a trainer that fails on
// its data), of a rank whose worker is gone; top's table of a cp = 4 job, checked against the step
// record it comes from.
#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/local_cluster.h"

namespace ringtrain::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> Mesh(int cp, int steps) {
  return {"parallelism.data_parallel_replicate_degree=1",
          "parallelism.context_parallel_degree=" + std::to_string(cp),
          "training.steps=" + std::to_string(steps), "lr_scheduler.warmup_steps=2",
          "metrics.log_freq=1"};
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(LogsTest, RunningAndFinishedRanksAndTopOfACp4Job) {
  LocalCluster cluster(4);
  const v1::Job job = cluster.Submit(ConfigPath("debug_model.toml"), Mesh(4, 16));
  ASSERT_TRUE(cluster.WaitForJob(
      job.job_id(), [](const v1::Job& j) { return j.last_step() >= 2; }, 120, "two steps"));

  // Follow rank 0 from now until the rank ends (the job finishing ends the stream by itself).
  const std::string follow_out = cluster.dir() / "follow.txt";
  Subprocess follow = StartCommand({BinDir() + "/ringctl", "logs", job.job_id(), "--rank", "0",
                                    "--follow", "--coordinator", cluster.address()},
                                   follow_out);

  // A running rank's log so far: the agent's start note and the trainer's stderr, timestamped.
  const CommandResult running = cluster.Ringctl({"logs", job.job_id(), "--rank", "0"});
  ASSERT_EQ(running.exit_code, 0) << running.output;
  EXPECT_THAT(running.output, HasSubstr("  agent  trainer started: rank 0 of 4, pid "));
  EXPECT_THAT(running.output, HasSubstr("  stderr  "));
  EXPECT_THAT(running.output, HasSubstr("loss"));
  EXPECT_THAT(running.output, Not(HasSubstr("trainer exited")));

  // --tail with JSON: exactly the last lines, each a parseable object.
  const CommandResult tail =
      cluster.Ringctl({"logs", job.job_id(), "--rank", "1", "--tail", "2", "--output", "json"});
  ASSERT_EQ(tail.exit_code, 0) << tail.output;
  ASSERT_EQ(Lines(tail.output).size(), 2u) << tail.output;
  for (const std::string& line : Lines(tail.output)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["job_id"], job.job_id());
    EXPECT_EQ(j["rank"], 1);
    EXPECT_TRUE(j["stream"] == "stderr" || j["stream"] == "stdout" || j["stream"] == "agent");
    EXPECT_EQ(j["time"].get<std::string>().size(), 27u);  // 2026-12-02T11:25:56.123456Z
  }

  // top while it runs: four rows, each CP group's imbalance, JSON that parses — and the figures
  // are those of the step record the coordinator holds for that step.
  const CommandResult top = cluster.Ringctl({"top", job.job_id(), "--once", "--output", "json"});
  ASSERT_EQ(top.exit_code, 0) << top.output;
  const nlohmann::json table = nlohmann::json::parse(top.output);
  ASSERT_EQ(table["ranks"].size(), 4u) << top.output;
  ASSERT_EQ(table["cp_groups"].size(), 1u);
  const int64_t step = table["step"];
  const std::vector<v1::JobEvent> events = cluster.Watch(job.job_id(), step, 120);
  ASSERT_FALSE(events.empty());
  std::string record;
  for (const v1::JobEvent& e : events) {
    if (e.has_step() && e.step().step() == step) record = e.step().record_json();
  }
  const nlohmann::json ranks = nlohmann::json::parse(record)["ranks"];
  ASSERT_EQ(ranks.size(), 4u);
  double max_attention = 0;
  double min_attention = 1e300;
  int slowest = -1;
  for (int r = 0; r < 4; ++r) {
    const double a = ranks[r]["attention_seconds"];
    EXPECT_EQ(table["ranks"][r]["attention_seconds"].get<double>(), a);
    EXPECT_EQ(table["ranks"][r]["comm_wait_seconds"].get<double>(),
              ranks[r]["comm_wait_seconds"].get<double>());
    EXPECT_EQ(table["ranks"][r]["ring_wait_seconds"].get<double>(),
              ranks[r]["ring_wait_seconds"].get<double>());
    EXPECT_EQ(table["ranks"][r]["bytes_sent"].get<double>(), ranks[r]["bytes_sent"].get<double>());
    EXPECT_EQ(table["ranks"][r]["peak_memory_bytes"].get<double>(),
              ranks[r]["peak_memory_bytes"].get<double>());
    if (a > max_attention) slowest = r;
    max_attention = std::max(max_attention, a);
    min_attention = std::min(min_attention, a);
  }
  ASSERT_GT(min_attention, 0);
  EXPECT_DOUBLE_EQ(table["cp_groups"][0]["imbalance"].get<double>(), max_attention / min_attention);
  EXPECT_EQ(table["slowest_rank"], slowest);
  std::printf("top at step %lld: cp imbalance %.3f, slowest rank %d\n",
              static_cast<long long>(step), max_attention / min_attention, slowest);
  const CommandResult top_table = cluster.Ringctl({"top", job.job_id()});  // not a tty: once
  ASSERT_EQ(top_table.exit_code, 0) << top_table.output;
  EXPECT_THAT(top_table.output, HasSubstr("<- slowest"));
  EXPECT_THAT(top_table.output, HasSubstr("cp group 0: attention max/min "));
  // The rank's place in its CP group, and the mesh as `get` prints it.
  EXPECT_THAT(top_table.output, HasSubstr("\n3     0     3/4  "));
  EXPECT_THAT(top_table.output, HasSubstr("  world 4 = dp 1 × cp 4, cpu  "));
  const CommandResult get = cluster.Ringctl({"get", job.job_id()});
  EXPECT_THAT(get.output, HasSubstr("world 4 = dp 1 × cp 4, cpu\n"));
  EXPECT_THAT(get.output, HasSubstr(" (cp 3/4 of cp group 0, dp index 0)"));

  ASSERT_TRUE(cluster.WaitForJob(job.job_id(), IsFinal, 240, "end"));
  ASSERT_EQ(cluster.Get(job.job_id()).state(), v1::JOB_STATE_SUCCEEDED) << cluster.Logs();
  ASSERT_EQ(WaitCommand(follow, 30), 0) << ReadFile(follow_out);
  // top of the finished job: its final state, not the RUNNING of the history replayed before
  // its last step.
  const CommandResult top_finished = cluster.Ringctl({"top", job.job_id()});
  ASSERT_EQ(top_finished.exit_code, 0) << top_finished.output;
  EXPECT_THAT(top_finished.output, HasSubstr("  SUCCEEDED  step 16/16"));

  // The finished rank's log: whole, ending with the exit note; the follow saw exactly the same.
  const CommandResult finished = cluster.Ringctl({"logs", job.job_id(), "--rank", "0"});
  ASSERT_EQ(finished.exit_code, 0) << finished.output;
  EXPECT_THAT(finished.output, HasSubstr("step 16/16"));
  EXPECT_TRUE(absl::EndsWith(finished.output, "  agent  trainer exited with status 0\n"))
      << finished.output;
  EXPECT_EQ(ReadFile(follow_out), finished.output);
  // The same over the API, which names the worker the rank ran on.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::StreamLogsRequest request;
  request.set_job_id(job.job_id());
  request.set_rank(3);
  auto reader = cluster.stub().StreamLogs(&context, request);
  v1::StreamLogsResponse response;
  int lines = 0;
  std::string worker;
  while (reader->Read(&response)) {
    lines += response.lines_size();
    worker = response.worker_id();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_GT(lines, 2);
  EXPECT_EQ(worker, cluster.Get(job.job_id()).mesh(3).worker_id());

  // Bad requests: a rank the job does not have (2), an unknown job (1).
  EXPECT_EQ(cluster.Ringctl({"logs", job.job_id(), "--rank", "4"}).exit_code, 2);
  EXPECT_EQ(cluster.Ringctl({"logs", "job-999999"}).exit_code, 1);
}

TEST(LogsTest, CrashedRanksAndAWorkerThatIsGone) {
  LocalCluster cluster(2);
  // A rank killed mid-run: its log ends with the signal; its peer's with its own error.
  const v1::Job job = cluster.Submit(ConfigPath("debug_model.toml"), Mesh(2, 400));
  ASSERT_TRUE(cluster.WaitForJob(
      job.job_id(), [](const v1::Job& j) { return j.last_step() >= 1; }, 120, "first step"));
  const pid_t victim = cluster.TrainerPid(job.job_id(), 1);
  ASSERT_GT(victim, 0);
  kill(victim, SIGKILL);
  ASSERT_TRUE(cluster.WaitForJob(job.job_id(), IsFinal, 120, "failed"));
  const v1::Job failed = cluster.Get(job.job_id());
  EXPECT_EQ(failed.state(), v1::JOB_STATE_FAILED);
  const CommandResult killed = cluster.Ringctl({"logs", job.job_id(), "--rank", "1"});
  ASSERT_EQ(killed.exit_code, 0) << killed.output;
  EXPECT_TRUE(absl::EndsWith(killed.output, "  agent  trainer killed by signal 9 (Killed)\n"))
      << killed.output;
  const CommandResult peer = cluster.Ringctl({"logs", job.job_id(), "--rank", "0", "--tail", "5"});
  ASSERT_EQ(peer.exit_code, 0) << peer.output;
  EXPECT_THAT(peer.output, HasSubstr("  agent  trainer "));

  // A trainer that fails on its data (a text file too short for one sequence): its stderr is in
  // the log, the same lines the job's error carries.
  WriteFile(cluster.data_root() + "/tiny.txt", "too short");
  const v1::Job bad = cluster.Submit(
      ConfigPath("debug_model.toml"),
      {"parallelism.data_parallel_replicate_degree=1", "training.steps=3",
       "lr_scheduler.warmup_steps=1", "training.dataset=text", "training.dataset_path=tiny.txt"});
  ASSERT_FALSE(bad.job_id().empty());
  ASSERT_TRUE(cluster.WaitForJob(bad.job_id(), IsFinal, 120, "failed"));
  const v1::Job bad_end = cluster.Get(bad.job_id());
  ASSERT_EQ(bad_end.state(), v1::JOB_STATE_FAILED);
  ASSERT_FALSE(bad_end.error().stderr_tail().empty());
  const CommandResult bad_log = cluster.Ringctl({"logs", bad.job_id(), "--output", "json"});
  ASSERT_EQ(bad_log.exit_code, 0) << bad_log.output;
  std::vector<std::string> stderr_lines;
  std::string last;
  for (const std::string& line : Lines(bad_log.output)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["stream"] == "stderr") stderr_lines.push_back(j["text"]);
    last = j["text"];
  }
  // The error keeps the last 40 stderr lines; the log has them all.
  const size_t keep = std::min<size_t>(40, stderr_lines.size());
  stderr_lines.erase(stderr_lines.begin(), stderr_lines.end() - keep);
  EXPECT_EQ(absl::StrJoin(stderr_lines, "\n"), bad_end.error().stderr_tail());
  EXPECT_EQ(last, absl::StrCat("trainer exited with status ", bad_end.error().exit_status()));

  // The worker that holds a log is gone: UNAVAILABLE naming it, exit 3.
  const std::string holder = failed.mesh(1).worker_id();
  int index = -1;
  for (int w = 0; w < 2; ++w) {
    if (std::filesystem::exists(cluster.work_dir(w) + "/" + job.job_id() + "/rank-1")) index = w;
  }
  ASSERT_GE(index, 0);
  cluster.SignalWorker(index, SIGKILL);
  const CommandResult gone = cluster.Ringctl({"logs", job.job_id(), "--rank", "1"});
  EXPECT_EQ(gone.exit_code, 3) << gone.output;
  EXPECT_THAT(gone.output, HasSubstr(holder)) << gone.output;
}

}  // namespace
}  // namespace ringtrain::testing
