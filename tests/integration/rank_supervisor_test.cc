// RankSupervisor against fake trainers (shell scripts written into a TempDir), plus one run of the
// real ringtrain-trainer when it has been built. The hang tests' trainers beat as the real one does
// (hang_detector.h), ten times faster, against limits of about a second.
#include "worker/agent/rank_supervisor.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/printable.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_util.h"
#include "worker/agent/rank_log.h"
#include "worker/agent/trainer_pid_file.h"

namespace ringtrain {
namespace {

using ::ringtrain::testing::TempDir;
using Clock = std::chrono::steady_clock;

// Collects what the callbacks report; on_exit must come exactly once, on_hung at most once and
// before it.
class Collector {
 public:
  RankSupervisor::Callbacks Callbacks() {
    return {[this](const std::string& line) {
              absl::MutexLock lock(&mu_);
              EXPECT_FALSE(exit_.has_value()) << "record after on_exit: " << line;
              records_.push_back(line);
            },
            [this](const RankExit& e) {
              absl::MutexLock lock(&mu_);
              EXPECT_FALSE(exit_.has_value()) << "on_exit called twice";
              exit_ = e;
            },
            [this](const std::string& reason) {
              absl::MutexLock lock(&mu_);
              EXPECT_FALSE(exit_.has_value()) << "on_hung after on_exit: " << reason;
              EXPECT_FALSE(hung_.has_value()) << "on_hung called twice: " << reason;
              hung_ = reason;
              hung_at_ = Clock::now();
            }};
  }
  // The hang's reason, or nullopt if none came within `timeout`.
  std::optional<std::string> WaitHung(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](std::optional<std::string>* h) { return h->has_value(); }, &hung_),
                         timeout);
    return hung_;
  }
  std::optional<std::string> hung() {
    absl::MutexLock lock(&mu_);
    return hung_;
  }
  Clock::time_point hung_at() {
    absl::MutexLock lock(&mu_);
    return hung_at_;
  }
  // The exit, or nullopt if it did not come within `timeout`.
  std::optional<RankExit> WaitExit(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](std::optional<RankExit>* e) { return e->has_value(); }, &exit_),
                         timeout);
    return exit_;
  }
  std::vector<std::string> records() {
    absl::MutexLock lock(&mu_);
    return records_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> records_ ABSL_GUARDED_BY(mu_);
  std::optional<RankExit> exit_ ABSL_GUARDED_BY(mu_);
  std::optional<std::string> hung_ ABSL_GUARDED_BY(mu_);
  Clock::time_point hung_at_ ABSL_GUARDED_BY(mu_);
};

// Finds the metrics path among the arguments, as the trainer does; `beat N PHASE SECONDS STEP`
// writes the progress file as the trainer does (a temporary file, renamed).
constexpr char kPrologue[] = R"(#!/bin/sh
m=""
for a in "$@"; do case "$a" in --metrics.jsonl=*) m="${a#--metrics.jsonl=}";; esac; done
p="$RINGTRAIN_PROGRESS_FILE"
beat() {
  printf '{"beat":%d,"phase":"%s","phase_seconds":%s,"step":%d}\n' "$1" "$2" "$3" "$4" > "$p.tmp"
  mv "$p.tmp" "$p"
}
)";

HangLimits Limits(int silence_ms, int stall_ms, int grace_ms) {
  HangLimits limits;
  limits.silence_limit = std::chrono::milliseconds(silence_ms);
  limits.stall_limit = std::chrono::milliseconds(stall_ms);
  limits.startup_grace = std::chrono::milliseconds(grace_ms);
  return limits;
}

class RankSupervisorTest : public ::testing::Test {
 protected:
  // Writes an executable script and returns a launch that runs it with work_dir under dir_.
  RankLaunch Script(const std::string& body) {
    std::string path = dir_ / "trainer.sh";
    testing::WriteFile(path, std::string(kPrologue) + body);
    chmod(path.c_str(), 0755);
    RankLaunch launch;
    launch.trainer_path = path;
    launch.config_path = "job.toml";
    launch.world_size = 1;
    launch.master_addr = "127.0.0.1";
    launch.master_port = 29500;
    launch.device = "cpu";
    launch.work_dir = dir_ / "work";
    return launch;
  }
  std::string Work(const std::string& name) { return dir_ / ("work/" + name); }
  // Waits until `path` exists (the script has reached a point), up to 5 s.
  bool WaitFile(const std::string& path) {
    return testing::WaitFor([&] { return access(path.c_str(), F_OK) == 0; }, 5);
  }
  // The pid the script wrote into `path`, once the whole line is there (up to 5 s); -1 if not.
  pid_t WaitPid(const std::string& path) {
    std::string text;
    const bool written = testing::WaitFor(
        [&] { return !(text = testing::ReadFile(path)).empty() && text.back() == '\n'; }, 5);
    return written ? std::stoi(text) : -1;
  }
  // Whether `pid` is gone, polling up to 2 s.
  bool Gone(pid_t pid) {
    return testing::WaitFor([&] { return kill(pid, 0) != 0; }, 2);
  }

  TempDir dir_;
  Collector collector_;
};

TEST_F(RankSupervisorTest, RecordsInOrderExactlyOnceIncludingJustBeforeExit) {
  auto sup = RankSupervisor::Start(Script(R"(
for i in 1 2 3; do echo "{\"step\":$i}" >> "$m"; sleep 0.15; done
for i in 4 5 6 7 8; do echo "{\"step\":$i}" >> "$m"; done
)"),
                                   collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_status, 0);
  std::vector<std::string> want;
  for (int i = 1; i <= 8; ++i) want.push_back("{\"step\":" + std::to_string(i) + "}");
  EXPECT_EQ(collector_.records(), want);
}

TEST_F(RankSupervisorTest, PartialLineWaitsForItsNewline) {
  auto sup = RankSupervisor::Start(Script(R"(
printf '{"step":1' >> "$m"
touch "$m.half"
while [ ! -e "$m.go" ]; do sleep 0.02; done
printf '}\n{"step":' >> "$m"
sleep 0.3
printf '2}\n{"never":' >> "$m"
)"),
                                   collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  ASSERT_TRUE(WaitFile(Work("metrics.jsonl.half")));
  // The script waits for metrics.jsonl.go, so the half line stays half for as long as this takes:
  // three polls of the supervisor, which must deliver nothing meanwhile.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(collector_.records().empty());
  testing::WriteFile(Work("metrics.jsonl.go"), "");
  ASSERT_TRUE(collector_.WaitExit(absl::Seconds(10)).has_value());
  EXPECT_EQ(collector_.records(),
            (std::vector<std::string>{"{\"step\":1}", "{\"step\":2}"}));  // the tail never ends
}

TEST_F(RankSupervisorTest, ChildSeesArgsAndEnv) {
  RankLaunch launch = Script(R"(
echo "$@" > "$(dirname "$m")/seen.txt"
echo "RANK=$RANK WORLD_SIZE=$WORLD_SIZE MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT OMP_NUM_THREADS=$OMP_NUM_THREADS" >> "$(dirname "$m")/seen.txt"
read line && echo "stdin not empty" >> "$(dirname "$m")/seen.txt"
echo "to stdout"
)");
  launch.overrides = {"--training.steps=2", "--a.b=c"};
  launch.rank = 2;
  launch.world_size = 4;
  launch.master_addr = "10.0.0.7";
  launch.master_port = 1234;
  launch.device = "cuda:1";
  launch.threads = 3;
  auto sup = RankSupervisor::Start(launch, collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  ASSERT_TRUE(collector_.WaitExit(absl::Seconds(10)).has_value());
  EXPECT_EQ(testing::ReadFile(Work("seen.txt")),
            "job.toml --training.steps=2 --a.b=c --metrics.jsonl=" + Work("metrics.jsonl") +
                " --device=cuda:1\n"
                "RANK=2 WORLD_SIZE=4 MASTER_ADDR=10.0.0.7 MASTER_PORT=1234 OMP_NUM_THREADS=3\n");
  // rank.log: the agent's start note, the trainer's line, the agent's exit note (rank_log.h).
  const std::vector<std::string> log =
      absl::StrSplit(testing::ReadFile(Work("rank.log")), '\n', absl::SkipEmpty());
  ASSERT_EQ(log.size(), 3u) << testing::ReadFile(Work("rank.log"));
  EXPECT_EQ(ParseRankLogLine(log[0]).stream, "agent");
  EXPECT_TRUE(
      absl::StartsWith(ParseRankLogLine(log[0]).text, "trainer started: rank 2 of 4, pid "));
  EXPECT_EQ(ParseRankLogLine(log[1]).stream, "stdout");
  EXPECT_EQ(ParseRankLogLine(log[1]).text, "to stdout");
  EXPECT_EQ(ParseRankLogLine(log[2]).text, "trainer exited with status 0");
  EXPECT_TRUE(collector_.records().empty());  // no metrics file: not an error
}

TEST_F(RankSupervisorTest, RankLogStampsBothStreamsInOrderAndAppendsAcrossRuns) {
  const std::string script = R"(
echo "out 1"
echo "err 1" >&2
sleep 0.2
printf 'out 2 without newline'
echo "err 2" >&2
exit 4
)";
  for (int run = 0; run < 2; ++run) {
    Collector collector;
    const absl::Time started = absl::Now() - absl::Seconds(1);
    auto sup = RankSupervisor::Start(Script(script), collector.Callbacks());
    ASSERT_TRUE(sup.ok()) << sup.status();
    ASSERT_TRUE(collector.WaitExit(absl::Seconds(10)).has_value());
    const std::vector<std::string> log =
        absl::StrSplit(testing::ReadFile(Work("rank.log")), '\n', absl::SkipEmpty());
    ASSERT_EQ(log.size(), 6u * (run + 1)) << testing::ReadFile(Work("rank.log"));
    std::vector<std::string> seen;
    for (size_t i = 6 * run; i < log.size(); ++i) {
      const RankLogLine line = ParseRankLogLine(log[i]);
      EXPECT_GE(absl::FromUnixMicros(line.time_unix_micros), started) << log[i];
      EXPECT_LE(absl::FromUnixMicros(line.time_unix_micros), absl::Now()) << log[i];
      seen.push_back(line.stream + ": " + line.text);
    }
    EXPECT_EQ(seen.front().rfind("agent: trainer started", 0), 0u);
    EXPECT_EQ(seen.back(), "agent: trainer exited with status 4");
    // Each stream in its own order; "out 2" is written when stdout closes.
    auto index = [&](const std::string& s) {
      return std::find(seen.begin(), seen.end(), s) - seen.begin();
    };
    EXPECT_LT(index("stdout: out 1"), index("stderr: err 2"));
    EXPECT_LT(index("stderr: err 1"), index("stderr: err 2"));
    EXPECT_LT(index("stderr: err 1"), static_cast<long>(seen.size()));
    EXPECT_LT(index("stdout: out 2 without newline"), static_cast<long>(seen.size()));
  }
}

TEST_F(RankSupervisorTest, KilledTrainerIsNotedInTheLog) {
  auto sup = RankSupervisor::Start(Script("echo 'about to die' >&2\nkill -9 $$\n"),
                                   collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  ASSERT_TRUE(collector_.WaitExit(absl::Seconds(10)).has_value());
  const std::string log = testing::ReadFile(Work("rank.log"));
  EXPECT_NE(log.find(" stderr about to die\n"), std::string::npos) << log;
  EXPECT_NE(log.find(" agent trainer killed by signal 9 (Killed)\n"), std::string::npos) << log;
}

TEST_F(RankSupervisorTest, ExitStatusAndStderrTail) {
  auto sup = RankSupervisor::Start(Script(R"(
echo "out line"
i=1; while [ $i -le 100 ]; do echo "err $i" >&2; i=$((i+1)); done
exit 3
)"),
                                   collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_status, 3);
  EXPECT_EQ(e->signal, 0);
  std::string want;
  for (int i = 61; i <= 100; ++i) want += "err " + std::to_string(i) + (i < 100 ? "\n" : "");
  EXPECT_EQ(e->stderr_tail, want);
  std::string log = testing::ReadFile(Work("rank.log"));
  EXPECT_NE(log.find("out line\n"), std::string::npos);
  EXPECT_NE(log.find("err 1\n"), std::string::npos);
  EXPECT_NE(log.find("err 100\n"), std::string::npos);
}

TEST_F(RankSupervisorTest, KilledBySignalReportsIt) {
  auto sup = RankSupervisor::Start(Script("echo dying >&2\nkill -USR1 $$\nsleep 5\n"),
                                   collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_status, -1);
  EXPECT_EQ(e->signal, SIGUSR1);
  EXPECT_EQ(e->stderr_tail, "dying");
}

TEST_F(RankSupervisorTest, CancelStopsTheProcessGroup) {
  auto sup = RankSupervisor::Start(Script(R"(
sleep 30 &
echo $! > "$m.child"
wait
)"),
                                   collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  const pid_t child = WaitPid(Work("metrics.jsonl.child"));
  ASSERT_GT(child, 0);
  Clock::time_point start = Clock::now();
  (*sup)->Cancel(std::chrono::milliseconds(5000));
  (*sup)->Cancel(std::chrono::milliseconds(5000));  // twice: harmless
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1000));
  EXPECT_EQ(e->signal, SIGTERM);
  EXPECT_TRUE(Gone(child));
  (*sup)->Cancel(std::chrono::milliseconds(0));  // after exit: does nothing
}

TEST_F(RankSupervisorTest, IgnoredTermGetsKillAfterGrace) {
  auto sup = RankSupervisor::Start(Script(R"(
trap '' TERM
sleep 30 &
echo $! > "$m.child"
wait
)"),
                                   collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  const pid_t child = WaitPid(Work("metrics.jsonl.child"));
  ASSERT_GT(child, 0);
  Clock::time_point start = Clock::now();
  (*sup)->Cancel(std::chrono::milliseconds(400));
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(10));
  ASSERT_TRUE(e.has_value());
  Clock::duration took = Clock::now() - start;
  EXPECT_GE(took, std::chrono::milliseconds(400));
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_TRUE(Gone(child));
}

TEST_F(RankSupervisorTest, DestructorStopsARunningTrainer) {
  Clock::time_point start = Clock::now();
  {
    auto sup = RankSupervisor::Start(Script("sleep 30\n"), collector_.Callbacks());
    ASSERT_TRUE(sup.ok()) << sup.status();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1500));
  ASSERT_TRUE(collector_.WaitExit(absl::ZeroDuration()).has_value());
}

TEST_F(RankSupervisorTest, MissingOrNonExecutableTrainerIsAnError) {
  RankLaunch launch = Script("");
  launch.trainer_path = dir_ / "no-such-trainer";
  auto sup = RankSupervisor::Start(launch, collector_.Callbacks());
  ASSERT_FALSE(sup.ok());
  EXPECT_EQ(sup.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(sup.status().message().find(launch.trainer_path), std::string::npos);

  launch.trainer_path = dir_ / "plain.txt";
  testing::WriteFile(launch.trainer_path, "not a program\n");
  sup = RankSupervisor::Start(launch, collector_.Callbacks());
  ASSERT_FALSE(sup.ok());
  EXPECT_EQ(sup.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(sup.status().message().find(launch.trainer_path), std::string::npos);
  EXPECT_FALSE(collector_.WaitExit(absl::ZeroDuration()).has_value());
}

TEST_F(RankSupervisorTest, StderrTailIsValidUtf8AndCutOnACharacter) {
  // Line 1: 4095 ASCII bytes, then a 3-byte character across the 4096-byte cut, then more; line 2:
  // raw bytes that are not UTF-8.
  auto sup = RankSupervisor::Start(Script(R"(
head -c 4095 /dev/zero | tr '\0' a >&2
printf '\342\202\254 and the rest\n' >&2
printf 'raw \377\376 bytes\n' >&2
exit 1
)"),
                                   collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_status, 1);
  EXPECT_EQ(ValidUtf8(e->stderr_tail), e->stderr_tail);
  EXPECT_EQ(e->stderr_tail, std::string(4095, 'a') + "\nraw \xef\xbf\xbd\xef\xbf\xbd bytes");
  // rank.log keeps the bytes as they came.
  EXPECT_NE(testing::ReadFile(Work("rank.log")).find("a\342\202\254 and the rest\n"),
            std::string::npos);
}

TEST_F(RankSupervisorTest, ProgressFileIsNamedAndAStaleOneRemoved) {
  RankLaunch launch = Script(R"(
d=$(dirname "$m")
echo "$RINGTRAIN_PROGRESS_FILE" > "$d/seen.txt"
if [ -e "$RINGTRAIN_PROGRESS_FILE" ]; then echo "stale file left" >> "$d/seen.txt"; fi
sleep 0.5
)");
  launch.hang = Limits(0, 100, 0);
  std::filesystem::create_directories(launch.work_dir);
  // It would be a stall at once if it were read.
  testing::WriteFile(Work("progress.json"),
                     R"({"beat":9,"phase":"compute","phase_seconds":999,"step":5})");
  auto sup = RankSupervisor::Start(launch, collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_status, 0);
  EXPECT_EQ(testing::ReadFile(Work("seen.txt")), Work("progress.json") + "\n");
  EXPECT_EQ(collector_.hung(), std::nullopt);
}

TEST_F(RankSupervisorTest, TrainerPidFileWhileItRuns) {
  auto sup = RankSupervisor::Start(Script(R"(
touch "$m.running"
while [ ! -e "$m.go" ]; do sleep 0.02; done
)"),
                                   collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  ASSERT_TRUE(WaitFile(Work("metrics.jsonl.running")));
  absl::StatusOr<TrainerPidRecord> record = ReadTrainerPidFile(Work("trainer.pid"));
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->pid, (*sup)->pid());
  EXPECT_EQ(record->pgid, (*sup)->pid());
  EXPECT_TRUE(StillRuns(*record));
  testing::WriteFile(Work("metrics.jsonl.go"), "");
  ASSERT_TRUE(collector_.WaitExit(absl::Seconds(10)).has_value());
  EXPECT_NE(access(Work("trainer.pid").c_str(), F_OK), 0) << "trainer.pid outlives the trainer";
}

TEST_F(RankSupervisorTest, BeatingTrainerThatFinishesIsNotHung) {
  RankLaunch launch = Script(R"(
i=1
while [ $i -le 15 ]; do beat $i compute 0.$((i % 5)) $((i / 5)); sleep 0.1; i=$((i + 1)); done
)");
  launch.hang = Limits(3000, 1000, 1000);  // silence: room for a loaded machine
  auto sup = RankSupervisor::Start(launch, collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_status, 0) << e->stderr_tail;
  EXPECT_EQ(collector_.hung(), std::nullopt);
}

// A trainer stopped by SIGSTOP: no beat; then Cancel. A trainer that handles SIGTERM (as the real
// one does) gets it only once continued, so it takes the SIGKILL after the grace.
TEST_F(RankSupervisorTest, StoppedTrainerIsHungAndCancelStillEndsIt) {
  RankLaunch launch = Script(R"(
trap 'exit 143' TERM
i=1
while [ $i -le 5 ]; do beat $i compute 0.1 7; sleep 0.1; i=$((i + 1)); done
touch "$p.stopping"
kill -STOP $$
sleep 30
)");
  launch.hang = Limits(1000, 0, 5000);
  auto sup = RankSupervisor::Start(launch, collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  ASSERT_TRUE(WaitFile(Work("progress.json.stopping")));
  const Clock::time_point stopped = Clock::now();
  std::optional<std::string> reason = collector_.WaitHung(absl::Seconds(5));
  ASSERT_TRUE(reason.has_value());
  EXPECT_TRUE(absl::StartsWith(*reason, "no heartbeat from the trainer for ")) << *reason;
  EXPECT_TRUE(absl::EndsWith(*reason, " s (process stopped or frozen; last step 7)")) << *reason;
  // The last beat came at most 0.1 s before `stopped` (plus a poll).
  EXPECT_GE(collector_.hung_at() - stopped, std::chrono::milliseconds(700));
  EXPECT_LE(collector_.hung_at() - stopped, std::chrono::milliseconds(2000));
  EXPECT_FALSE(collector_.WaitExit(absl::ZeroDuration()).has_value());  // not stopped by itself

  const Clock::time_point cancelled = Clock::now();
  (*sup)->Cancel(std::chrono::milliseconds(500));
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_GE(Clock::now() - cancelled, std::chrono::milliseconds(500));
  EXPECT_TRUE(Gone((*sup)->pid()));
}

TEST_F(RankSupervisorTest, ComputingWithoutEndIsAStall) {
  RankLaunch launch = Script(R"(
t=0
while :; do beat $((t + 1)) compute $((t / 10)).$((t % 10)) 3; sleep 0.1; t=$((t + 1)); done
)");
  launch.hang = Limits(5000, 1000, 5000);
  const Clock::time_point start = Clock::now();
  auto sup = RankSupervisor::Start(launch, collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  std::optional<std::string> reason = collector_.WaitHung(absl::Seconds(10));
  ASSERT_TRUE(reason.has_value());
  EXPECT_TRUE(absl::StartsWith(*reason, "computing for 1.")) << *reason;
  EXPECT_TRUE(absl::EndsWith(
      *reason, " s without reaching a collective or a step boundary (deadlock?; last step 3)"))
      << *reason;
  EXPECT_GE(collector_.hung_at() - start, std::chrono::milliseconds(1000));
  (*sup)->Cancel(std::chrono::milliseconds(2000));
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->signal, SIGTERM);
}

TEST_F(RankSupervisorTest, WaitingForPeersIsNotAHang) {
  RankLaunch launch = Script(R"(
t=0
while [ $t -le 20 ]; do
  beat $((t + 1)) wait $((t / 10)).$((t % 10)) 3; sleep 0.1; t=$((t + 1))
done
)");
  launch.hang = Limits(3000, 500, 1000);
  auto sup = RankSupervisor::Start(launch, collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(10));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_status, 0) << e->stderr_tail;
  EXPECT_EQ(collector_.hung(), std::nullopt);
}

TEST_F(RankSupervisorTest, NoBeatAtAllIsAHangOnlyWhenSilenceIsWatched) {
  {
    RankLaunch launch = Script("sleep 30\n");
    launch.hang = Limits(500, 0, 500);
    const Clock::time_point start = Clock::now();
    auto sup = RankSupervisor::Start(launch, collector_.Callbacks());
    ASSERT_TRUE(sup.ok()) << sup.status();
    std::optional<std::string> reason = collector_.WaitHung(absl::Seconds(5));
    ASSERT_TRUE(reason.has_value());
    EXPECT_GE(collector_.hung_at() - start, std::chrono::milliseconds(1000));
    EXPECT_TRUE(absl::StrContains(*reason,
                                  " s since it started (process stopped or frozen before "
                                  "its first beat, or a trainer that does not write "
                                  "RINGTRAIN_PROGRESS_FILE)"))
        << *reason;
  }  // the destructor stops it
  Collector stall_only;
  RankLaunch launch = Script("sleep 1.5\n");
  launch.hang = Limits(0, 300, 0);
  auto sup = RankSupervisor::Start(launch, stall_only.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  ASSERT_TRUE(stall_only.WaitExit(absl::Seconds(10)).has_value());
  EXPECT_EQ(stall_only.hung(), std::nullopt);
}

TEST_F(RankSupervisorTest, NegativeHangLimitIsAnError) {
  RankLaunch launch = Script("");
  launch.hang.stall_limit = std::chrono::milliseconds(-1);
  auto sup = RankSupervisor::Start(launch, collector_.Callbacks());
  ASSERT_FALSE(sup.ok());
  EXPECT_EQ(sup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(sup.status().message(), "hang.stall_limit")) << sup.status();
}

TEST_F(RankSupervisorTest, RealTrainerReportsTwoSteps) {
  std::string trainer = testing::BinDir() + "/ringtrain-trainer";
  if (access(trainer.c_str(), X_OK) != 0) GTEST_SKIP() << trainer << " not built";
  RankLaunch launch;
  launch.trainer_path = trainer;
  launch.config_path = testing::ConfigPath("debug_model.toml");
  launch.overrides = {"--training.steps=2", "--lr_scheduler.warmup_steps=1",
                      "--lr_scheduler.decay_ratio=0"};
  launch.rank = 0;
  launch.world_size = 1;
  launch.master_addr = "127.0.0.1";
  launch.master_port = testing::FreePort();
  launch.device = "cpu";
  launch.work_dir = dir_ / "work";
  launch.threads = 2;
  auto sup = RankSupervisor::Start(launch, collector_.Callbacks());
  ASSERT_TRUE(sup.ok()) << sup.status();
  std::optional<RankExit> e = collector_.WaitExit(absl::Seconds(300));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_status, 0) << e->stderr_tail;
  std::vector<std::string> records = collector_.records();
  ASSERT_EQ(records.size(), 2u) << testing::ReadFile(Work("rank.log"));
  EXPECT_EQ(nlohmann::json::parse(records[0]).at("step"), 1);
  EXPECT_EQ(nlohmann::json::parse(records[1]).at("step"), 2);
}

}  // namespace
}  // namespace ringtrain
