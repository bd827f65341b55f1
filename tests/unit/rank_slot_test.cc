// RankSlot (worker/agent/rank_slot.h) with a real RankSupervisor running a fake trainer (a shell
// script): what it queues on the Outbox and in which order (with the run's attempt), when it counts
// as ended, cancel, epochs, the exit queued again for a cancel of an ended rank, and start
// failures.
#include "worker/agent/rank_slot.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using ::ringtrain::testing::TempDir;

// Writes `steps` records {"step":i} to the --metrics.jsonl path, then waits for `hold` to be
// removed (if the config names one) and exits with `exit`; all from the config, its first argument.
constexpr char kFakeTrainer[] = R"(#!/bin/sh
m=""
for a in "$@"; do case "$a" in --metrics.jsonl=*) m="${a#--metrics.jsonl=}";; esac; done
steps=$(sed -n 's/^steps = //p' "$1")
hold=$(sed -n 's/^hold = //p' "$1")
code=$(sed -n 's/^exit = //p' "$1")
i=1
while [ "$i" -le "${steps:-0}" ]; do
  echo "{\"step\":$i}" >> "$m"
  i=$((i + 1))
done
while [ -n "$hold" ] && [ -e "$hold" ]; do sleep 0.02; done
exit "${code:-0}"
)";

constexpr absl::Duration kWait = absl::Seconds(20);

// "started J/R", "report J/R RECORD", "exit J/R status S signal G", writing and acknowledging
// each until the outbox is empty.
std::vector<std::string> Drain(Outbox& outbox) {
  std::vector<std::string> out;
  while (std::optional<v1::AgentMessage> m = outbox.NextToWrite()) {
    if (m->has_rank_started()) {
      out.push_back(
          absl::StrCat("started ", m->rank_started().job_id(), "/", m->rank_started().rank()));
    } else if (m->has_rank_report()) {
      out.push_back(absl::StrCat("report ", m->rank_report().job_id(), "/", m->rank_report().rank(),
                                 " ", m->rank_report().record_json()));
    } else if (m->has_rank_hung()) {
      out.push_back(absl::StrCat("hung ", m->rank_hung().job_id(), "/", m->rank_hung().rank()));
    } else if (m->has_rank_exit()) {
      out.push_back(absl::StrCat("exit ", m->rank_exit().job_id(), "/", m->rank_exit().rank(),
                                 " status ", m->rank_exit().exit_status(), " signal ",
                                 m->rank_exit().signal()));
    }
    outbox.MarkWritten(m->seq());
    outbox.Acknowledge(m->seq());
  }
  return out;
}

class RankSlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFile(trainer_, kFakeTrainer);
    chmod(trainer_.c_str(), 0755);
  }

  // A launch of the fake trainer for `job_id` rank `rank` whose config is `config`.
  RankLaunch Launch(const std::string& job_id, int rank, const std::string& config) {
    RankLaunch launch;
    launch.trainer_path = trainer_;
    launch.work_dir = dir_ / absl::StrCat(job_id, "-rank-", rank);
    launch.config_path = dir_ / absl::StrCat(job_id, "-", rank, ".toml");
    testing::WriteFile(launch.config_path, config);
    launch.rank = rank;
    launch.world_size = rank + 1;
    launch.master_addr = "127.0.0.1";
    launch.master_port = 29500;
    launch.device = "cpu";
    return launch;
  }

  // Waits for `n` on_change calls in all (false after kWait).
  bool AwaitChanges(int n) {
    absl::MutexLock lock(&mu_);
    const auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return changes_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kWait);
  }
  int changes() {
    absl::MutexLock lock(&mu_);
    return changes_;
  }
  // Whether a RankExit was queued at every on_change call that found the rank ended.
  bool exit_queued_when_ended() {
    absl::MutexLock lock(&mu_);
    return exit_queued_when_ended_;
  }

  TempDir dir_;
  const std::string trainer_ = dir_ / "fake-trainer.sh";
  Outbox outbox_{100};
  AgentMetrics metrics_;
  absl::Mutex mu_;
  int changes_ ABSL_GUARDED_BY(mu_) = 0;
  bool exit_queued_when_ended_ ABSL_GUARDED_BY(mu_) = true;
  // Last, so it goes first: its supervisor's callbacks use the members above.
  RankSlot slot_{&outbox_, &metrics_, [this] {
                   const bool ended = !slot_.info().active;
                   const bool exit_queued = outbox_.HasRankExit();
                   absl::MutexLock lock(&mu_);
                   ++changes_;
                   if (ended && !exit_queued) exit_queued_when_ended_ = false;
                 }};
};

TEST_F(RankSlotTest, QueuesStartedThenRankZerosRecordsThenExit) {
  EXPECT_EQ(slot_.info().job_id, "");
  ASSERT_TRUE(slot_.Start(Launch("job-1", 0, "steps = 3\nexit = 4\n"), "job-1", 0).ok());
  ASSERT_TRUE(slot_.AwaitEnd(kWait));
  EXPECT_TRUE(outbox_.HasRankExit()) << "the exit is queued before the rank counts as ended";
  // Three records and the exit; Start's RankStarted is the caller's to announce.
  ASSERT_TRUE(AwaitChanges(4));
  const RankSlot::Info info = slot_.info();
  EXPECT_FALSE(info.active);
  EXPECT_EQ(info.job_id, "job-1");
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(Drain(outbox_),
            (std::vector<std::string>{"started job-1/0", "report job-1/0 {\"step\":1}",
                                      "report job-1/0 {\"step\":2}", "report job-1/0 {\"step\":3}",
                                      "exit job-1/0 status 4 signal 0"}));
  slot_.Release();
  EXPECT_EQ(changes(), 4);
  EXPECT_TRUE(exit_queued_when_ended());
}

TEST_F(RankSlotTest, OtherRanksKeepTheirRecordsButReportTheirExit) {
  ASSERT_TRUE(slot_.Start(Launch("job-1", 1, "steps = 2\n"), "job-1", 0).ok());
  ASSERT_TRUE(slot_.AwaitEnd(kWait));
  EXPECT_EQ(Drain(outbox_),
            (std::vector<std::string>{"started job-1/1", "exit job-1/1 status 0 signal 0"}));
}

TEST_F(RankSlotTest, OneRankAtATimeAndCancelByJob) {
  const std::string hold = dir_ / "hold";
  testing::WriteFile(hold, "");
  ASSERT_TRUE(slot_.Start(Launch("job-1", 0, "hold = " + hold + "\n"), "job-1", 0).ok());
  EXPECT_TRUE(slot_.info().active);
  const absl::Status second = slot_.Start(Launch("job-2", 0, ""), "job-2", 0);
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
  EXPECT_FALSE(slot_.AwaitEnd(absl::Milliseconds(50)));
  EXPECT_FALSE(slot_.Cancel(std::chrono::milliseconds(2000), "job-2"));  // not this job's rank
  EXPECT_TRUE(slot_.info().active);
  EXPECT_FALSE(slot_.info().stopping);
  EXPECT_TRUE(slot_.Cancel(std::chrono::milliseconds(2000), "job-1"));
  ASSERT_TRUE(slot_.AwaitEnd(kWait));
  EXPECT_FALSE(slot_.info().stopping);                          // ended: its log is complete
  EXPECT_FALSE(slot_.Cancel(std::chrono::milliseconds(2000)));  // nothing runs
  EXPECT_EQ(Drain(outbox_),
            (std::vector<std::string>{"started job-1/0",
                                      absl::StrCat("exit job-1/0 status 0 signal ", SIGTERM)}));
  // The next rank may start once the last has ended.
  ASSERT_TRUE(slot_.Start(Launch("job-2", 0, ""), "job-2", 0).ok());
  ASSERT_TRUE(slot_.AwaitEnd(kWait));
  EXPECT_EQ(slot_.info().job_id, "job-2");
}

TEST_F(RankSlotTest, AGivenUpEpochDropsTheRanksLaterMessages) {
  const std::string hold = dir_ / "hold";
  testing::WriteFile(hold, "");
  ASSERT_TRUE(slot_.Start(Launch("job-1", 0, "steps = 1\nhold = " + hold + "\n"), "job-1", 0).ok());
  EXPECT_GE(outbox_.DropAll(), 1u);  // its RankStarted, and its record if already read
  std::remove(hold.c_str());
  ASSERT_TRUE(slot_.AwaitEnd(kWait));
  EXPECT_TRUE(outbox_.empty()) << "the exit belongs to the epoch given up";
  // No exit was kept for it: a cancel finds the rank ended but has nothing to send again.
  EXPECT_TRUE(slot_.RequeueExit("job-1", 0, 0));
  EXPECT_TRUE(outbox_.empty());
}

TEST_F(RankSlotTest, AHungRankIsReportedBetweenItsStartAndItsExit) {
  const std::string hold = dir_ / "hold";
  testing::WriteFile(hold, "");
  RankLaunch launch = Launch("job-1", 1, "hold = " + hold + "\n");
  // The fake trainer never beats: hung once 300 ms have passed.
  launch.hang.silence_limit = std::chrono::milliseconds(300);
  launch.hang.startup_grace = std::chrono::milliseconds(0);
  ASSERT_TRUE(slot_.Start(launch, "job-1", 2).ok());
  ASSERT_TRUE(AwaitChanges(1));
  EXPECT_TRUE(slot_.info().active) << "the agent only reports; the coordinator stops it";
  EXPECT_TRUE(slot_.Cancel(std::chrono::milliseconds(2000), "job-1"));
  ASSERT_TRUE(slot_.AwaitEnd(kWait));
  std::optional<v1::AgentMessage> hung;
  while (std::optional<v1::AgentMessage> m = outbox_.NextToWrite()) {
    if (m->has_rank_hung()) hung = m;
    outbox_.MarkWritten(m->seq());
  }
  ASSERT_TRUE(hung.has_value());
  EXPECT_EQ(hung->rank_hung().attempt(), 2);
  EXPECT_NE(hung->rank_hung().reason().find("no heartbeat from the trainer"), std::string::npos)
      << hung->rank_hung().reason();
  outbox_.Rewind();
  EXPECT_EQ(Drain(outbox_),
            (std::vector<std::string>{"started job-1/1", "hung job-1/1",
                                      absl::StrCat("exit job-1/1 status 0 signal ", SIGTERM)}));
}

TEST_F(RankSlotTest, MessagesCarryTheRunsAttempt) {
  ASSERT_TRUE(slot_.Start(Launch("job-1", 0, "steps = 1\nexit = 1\n"), "job-1", 2).ok());
  ASSERT_TRUE(slot_.AwaitEnd(kWait));
  EXPECT_EQ(slot_.info().attempt, 2);
  int messages = 0;
  while (std::optional<v1::AgentMessage> m = outbox_.NextToWrite()) {
    const int attempt = m->has_rank_started()  ? m->rank_started().attempt()
                        : m->has_rank_report() ? m->rank_report().attempt()
                                               : m->rank_exit().attempt();
    EXPECT_EQ(attempt, 2) << m->ShortDebugString();
    outbox_.MarkWritten(m->seq());
    ++messages;
  }
  EXPECT_EQ(messages, 3);
}

TEST_F(RankSlotTest, RequeueExitSendsAnEndedRanksExitOnceMore) {
  ASSERT_TRUE(slot_.Start(Launch("job-1", 0, "steps = 2\nexit = 3\n"), "job-1", 1).ok());
  ASSERT_TRUE(slot_.AwaitEnd(kWait));
  Drain(outbox_);  // delivered; the coordinator then asks to cancel it all the same
  EXPECT_FALSE(slot_.RequeueExit("job-1", 0, 0)) << "another run of the job";
  EXPECT_FALSE(slot_.RequeueExit("job-1", 1, 1)) << "another rank";
  EXPECT_FALSE(slot_.RequeueExit("job-2", 0, 1)) << "another job";
  EXPECT_TRUE(outbox_.empty());
  EXPECT_TRUE(slot_.RequeueExit("job-1", 0, 1));
  // With the exit still queued, it is not queued twice.
  EXPECT_TRUE(slot_.RequeueExit("job-1", 0, 1));
  EXPECT_EQ(Drain(outbox_), (std::vector<std::string>{"exit job-1/0 status 3 signal 0"}));
}

TEST_F(RankSlotTest, AStartThatFailsKeepsTheLastRank) {
  ASSERT_TRUE(slot_.Start(Launch("job-1", 0, ""), "job-1", 0).ok());
  ASSERT_TRUE(slot_.AwaitEnd(kWait));
  RankLaunch missing = Launch("job-2", 0, "");
  missing.trainer_path = dir_ / "no-such-trainer";
  const absl::Status started = slot_.Start(missing, "job-2", 0);
  EXPECT_FALSE(started.ok());
  EXPECT_NE(started.message().find("no-such-trainer"), absl::string_view::npos) << started;
  EXPECT_FALSE(slot_.info().active);
  EXPECT_EQ(slot_.info().job_id, "job-1");
  EXPECT_EQ(Drain(outbox_),
            (std::vector<std::string>{"started job-1/0", "exit job-1/0 status 0 signal 0"}));
}

}  // namespace
}  // namespace ringtrain
