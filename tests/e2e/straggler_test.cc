// Straggler detection on a real local cluster: a cp = 2 job whose rank-1 trainer is slowed on
// purpose (stopped and continued in turn, so it gets about half the wall time) is named within the
// detection window — in the step records, the trainer's log, `ringctl top`, `ringctl watch` (both
// outputs) and the coordinator's metrics — and no longer once it runs freely again; a balanced job
// names no rank at any step.
#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/local_cluster.h"

namespace ringtrain::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kWindow = 4;

std::vector<std::string> Overrides(int steps) {
  return {"parallelism.context_parallel_degree=2",
          "training.steps=" + std::to_string(steps),
          "lr_scheduler.warmup_steps=2",
          "metrics.log_freq=1",
          "metrics.straggler_window=" + std::to_string(kWindow),
          "metrics.straggler_threshold=1.25"};
}

struct Named {
  int rank = -1;               // the straggler the step's record names, -1: none
  double elapsed_seconds = 0;  // the record's: since the run started
  double step_seconds = 0;
  std::vector<double> compute_seconds;  // each rank's
};

// One line per step, for failure messages.
std::string Describe(const std::vector<Named>& named) {
  std::string text;
  for (size_t i = 0; i < named.size(); ++i) {
    absl::StrAppend(&text, "step ", i + 1, ": named ", named[i].rank, ", step ",
                    named[i].step_seconds, " s, compute ",
                    absl::StrJoin(named[i].compute_seconds, " "), "\n");
  }
  return text;
}

// What each stored step record says, by step.
std::vector<Named> NamedByStep(LocalCluster& cluster, const std::string& job_id) {
  std::vector<Named> named;
  for (const v1::JobEvent& e : cluster.Watch(job_id, 1, 120)) {
    if (!e.has_step()) continue;
    const nlohmann::json record = nlohmann::json::parse(e.step().record_json());
    const double ratio = record.value("straggler_ratio", 0.0);
    Named step{ratio > 0 ? record["straggler_rank"].get<int>() : -1,
               record["elapsed_seconds"].get<double>(),
               record["step_seconds"].get<double>(),
               {}};
    for (const nlohmann::json& rank : record.value("ranks", nlohmann::json::array())) {
      step.compute_seconds.push_back(rank.value("compute_seconds", 0.0));
    }
    named.push_back(std::move(step));
    if (ratio > 0) {
      EXPECT_GE(ratio, 1.25) << "step " << e.step().step();
    }
  }
  return named;
}

// Stops and continues `pid` in turn (`stopped` of every `period`) until `stop` is set.
void Slow(pid_t pid, std::chrono::milliseconds stopped, std::chrono::milliseconds period,
          const std::atomic<bool>* stop) {
  while (!stop->load()) {
    kill(pid, SIGSTOP);
    std::this_thread::sleep_for(stopped);
    kill(pid, SIGCONT);
    std::this_thread::sleep_for(period - stopped);
  }
}

TEST(StragglerTest, ASlowedRankIsNamedEverywhereAndABalancedRunNamesNone) {
  LocalCluster cluster(2);

  // The balanced job first: no rank is named at any step.
  const v1::Job balanced = cluster.Submit(ConfigPath("debug_model.toml"), Overrides(16));
  ASSERT_TRUE(cluster.WaitForJob(
      balanced.job_id(), [](const v1::Job& j) { return j.state() == v1::JOB_STATE_SUCCEEDED; }, 240,
      "the balanced job to succeed"));
  const std::vector<Named> none = NamedByStep(cluster, balanced.job_id());
  ASSERT_EQ(none.size(), 16u);
  for (size_t i = 0; i < none.size(); ++i) {
    EXPECT_EQ(none[i].rank, -1) << "step " << i + 1 << "\n" << Describe(none);
  }

  // The slowed job: rank 1's trainer gets about half the wall time from step 3 on.
  const int steps = 60;
  const v1::Job job = cluster.Submit(ConfigPath("debug_model.toml"), Overrides(steps));
  ASSERT_TRUE(cluster.WaitForJob(
      job.job_id(), [](const v1::Job& j) { return j.last_step() >= 3; }, 240, "step 3"));
  const pid_t victim = cluster.TrainerPid(job.job_id(), 1);
  ASSERT_GT(victim, 0);
  std::atomic<bool> stop_slowing{false};
  const int64_t slowed_from = cluster.Get(job.job_id()).last_step() + 1;
  std::thread slower(Slow, victim, std::chrono::milliseconds(30), std::chrono::milliseconds(60),
                     &stop_slowing);

  // Named within the window (and a step's slack for the step running when the slowing began):
  // in the coordinator's metrics and `ringctl top` while it runs.
  ASSERT_TRUE(cluster.WaitForJob(
      job.job_id(), [&](const v1::Job& j) { return j.last_step() >= slowed_from + kWindow + 8; },
      240, "the slowed steps"));
  const std::string page = HttpGet(cluster.coordinator_metrics(), "/metrics");
  EXPECT_THAT(page, HasSubstr(absl::StrCat("ringtrain_coordinator_job_straggler_rank{job_id=\"",
                                           job.job_id(), "\"} 1")));
  const CommandResult top = cluster.Ringctl({"top", job.job_id(), "--once", "--output", "json"});
  ASSERT_EQ(top.exit_code, 0) << top.output;
  const nlohmann::json table = nlohmann::json::parse(top.output);
  EXPECT_EQ(table["straggler_rank"], 1) << top.output;
  EXPECT_GE(table["straggler_ratio"].get<double>(), 1.25);
  EXPECT_TRUE(table["ranks"][1]["straggler"].get<bool>());
  EXPECT_GT(table["ranks"][1]["compute_seconds"].get<double>(), 0);
  const CommandResult top_text = cluster.Ringctl({"top", job.job_id(), "--once"});
  EXPECT_THAT(top_text.output, HasSubstr("<- straggler"));
  EXPECT_THAT(top_text.output, HasSubstr("straggler: rank 1, compute "));

  // Then it runs freely again and is no longer named by the end (`window` steps after).
  stop_slowing = true;
  slower.join();
  kill(victim, SIGCONT);
  const int64_t freed_after = cluster.Get(job.job_id()).last_step();
  ASSERT_TRUE(cluster.WaitForJob(
      job.job_id(), [](const v1::Job& j) { return j.state() == v1::JOB_STATE_SUCCEEDED; }, 240,
      "the slowed job to succeed"));

  const std::vector<Named> named = NamedByStep(cluster, job.job_id());
  ASSERT_EQ(named.size(), size_t(steps));
  ASSERT_GT(steps, freed_after + kWindow + 2) << "too few steps left to see it cleared";
  int64_t first_named = -1;
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_NE(named[i].rank, 0) << "rank 0 named at step " << i + 1 << "\n" << Describe(named);
    if (named[i].rank == 1 && first_named < 0) first_named = int64_t(i) + 1;
  }
  ASSERT_GT(first_named, 0) << "rank 1 was never named\n" << Describe(named);
  // The first slowed step as the records show it (the coordinator's last step, read when the
  // slowing began, may lag the trainers by a step or two): rank 1's compute over the threshold.
  int64_t first_slow = -1;
  for (int64_t step = std::max<int64_t>(1, slowed_from - 1); step <= steps; ++step) {
    const std::vector<double>& compute = named[size_t(step - 1)].compute_seconds;
    ASSERT_EQ(compute.size(), 2u) << "step " << step;
    if (compute[1] >= 1.25 * compute[0]) {
      first_slow = step;
      break;
    }
  }
  ASSERT_GT(first_slow, 0) << Describe(named);
  EXPECT_LE(first_slow, slowed_from + 3) << Describe(named);
  // Named after `window` slow steps in a row; a step's slack for a noisy one among them.
  EXPECT_GE(first_named, first_slow + kWindow - 1) << Describe(named);
  EXPECT_LE(first_named, first_slow + kWindow + 1) << Describe(named);
  EXPECT_EQ(named.back().rank, -1)
      << "still named after running freely from step " << freed_after << "\n"
      << Describe(named);
  const double delay = named[size_t(first_named - 1)].elapsed_seconds -
                       named[size_t(first_slow - 2)].elapsed_seconds;
  std::printf(
      "straggler named at step %lld, the first slowed step %lld (window %d steps): %.2f s after "
      "that step began\n",
      static_cast<long long>(first_named), static_cast<long long>(first_slow), kWindow, delay);

  // The job's events: watch's lines, and its JSON events; the trainer's log.
  const CommandResult watch = cluster.Ringctl({"watch", job.job_id()});
  EXPECT_THAT(watch.output, HasSubstr(absl::StrCat("step ", first_named,
                                                   ": rank 1 is a straggler: its compute took ")));
  EXPECT_THAT(watch.output, HasSubstr(": rank 1 is no longer a straggler"));
  const CommandResult watch_json = cluster.Ringctl({"watch", job.job_id(), "--output", "json"});
  bool named_event = false;
  for (const absl::string_view line : absl::StrSplit(watch_json.output, '\n', absl::SkipEmpty())) {
    const nlohmann::json event = nlohmann::json::parse(std::string(line), nullptr, false);
    if (!event.is_object()) continue;
    if (event["event"] == "straggler" && event["rank"] == 1) {
      named_event = true;
      EXPECT_EQ(event["step"], first_named);
      EXPECT_GE(event["ratio"].get<double>(), 1.25);
    }
  }
  EXPECT_TRUE(named_event) << watch_json.output;
  const CommandResult log = cluster.Ringctl({"logs", job.job_id(), "--rank", "0"});
  EXPECT_THAT(log.output, HasSubstr("rank 1 is a straggler: its compute took "));
  const CommandResult balanced_log = cluster.Ringctl({"logs", balanced.job_id(), "--rank", "0"});
  EXPECT_THAT(balanced_log.output, Not(HasSubstr("straggler")));
}

}  // namespace
}  // namespace ringtrain::testing
