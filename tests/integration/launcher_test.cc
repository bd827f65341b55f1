// ringtrain-run as a process: its usage errors, the environment and arguments each rank gets,
// output relaying, and taking a job down (a failing rank, a rank that ignores SIGTERM, Ctrl-C, a
// missing trainer). Argument parsing and the port pick alone: tests/unit/launch_*_test.cc.
// Most tests launch a fake trainer, a /bin/sh script written into a TempDir, so that they test the
// launcher alone and run in seconds; one runs the real trainer for one rank.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string Launcher() { return BinDir() + "/ringtrain-run"; }

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Writes an executable /bin/sh script `name` into `dir` and returns its path.
std::string WriteScript(const TempDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir / name;
  WriteFile(path, "#!/bin/sh\n" + body);
  chmod(path.c_str(), 0755);
  return path;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The lines "[rank r] ..." of `output`, prefix removed, in order.
std::vector<std::string> RankLines(const std::string& output, int rank) {
  const std::string prefix = "[rank " + std::to_string(rank) + "] ";
  std::vector<std::string> lines;
  for (const std::string& line : Lines(output)) {
    if (line.rfind(prefix, 0) == 0) lines.push_back(line.substr(prefix.size()));
  }
  return lines;
}

// Waits (up to 20 s) until `dir` holds files name.0 .. name.(count-1); returns the pids in them.
std::vector<pid_t> WaitForPids(const TempDir& dir, const std::string& name, int count) {
  std::vector<pid_t> pids;
  const bool all = WaitFor(
      [&] {
        pids.clear();
        for (int r = 0; r < count; ++r) {
          const std::string text = ReadFile(dir / (name + "." + std::to_string(r)));
          if (text.empty() || text.back() != '\n') return false;
          pids.push_back(std::stoi(text));
        }
        return true;
      },
      20);
  if (!all) ADD_FAILURE() << "the ranks did not all write " << name << ".* within 20 s";
  return pids;
}

// Shell text: record this shell's pid, then sleep 60 s in a child (recorded too) and wait for it.
// SIGTERM to the rank's process group ends both.
std::string RecordPidsAndSleep(const TempDir& dir) {
  return "sleep 60 &\n"
         "echo $! > \"" +
         dir.path() +
         "/child.$RANK\"\n"
         "echo $$ > \"" +
         dir.path() +
         "/pid.$RANK\"\n"
         "wait\n";
}

// Shell text for one rank that waits (at most 10 s) until `count` (a shell expression) pid files
// exist, then fails with `status`.
std::string WaitForPidFilesThenExit(const TempDir& dir, const std::string& count, int status) {
  return "i=0\n"
         "while [ \"$(ls '" +
         dir.path() + "' | grep -c '^pid\\.')\" -lt " + count +
         " ] && "
         "[ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\n"
         "echo \"rank $RANK giving up\" >&2\n"
         "exit " +
         std::to_string(status) + "\n";
}

// The shells the launcher started are reaped before it exits; their children, signalled at the
// same time, may take a moment more to die, so allow them 5 s.
void ExpectAllGone(const std::vector<pid_t>& pids) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (pid_t pid : pids) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    WaitFor([&] { return !IsRunning(pid); }, std::max(0.0, left));
    EXPECT_FALSE(IsRunning(pid)) << "process " << pid << " survived";
  }
}

TEST(LauncherTest, BadCommandLineExitsTwoWithUsage) {
  const auto r = RunCommand({Launcher(), "--nproc", "two", "job.toml"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("ringtrain-run: --nproc: 'two'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("usage: ringtrain-run"), std::string::npos) << r.output;
  const auto help = RunCommand({Launcher(), "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--grace-seconds"), std::string::npos) << help.output;
}

TEST(LauncherTest, EachRankGetsItsRendezvousEnvironmentAndTheOverridesVerbatim) {
  TempDir dir;
  const std::string trainer =
      WriteScript(dir, "trainer.sh",
                  "echo \"env RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE "
                  "MASTER_ADDR=$MASTER_ADDR OMP=$OMP_NUM_THREADS MKL=$MKL_NUM_THREADS\"\n"
                  "echo \"port $MASTER_PORT\"\n"
                  "for a in \"$@\"; do echo \"arg <$a>\"; done\n");
  const auto r = RunCommand({Launcher(), "--nproc", "3", "--trainer", trainer, "job.toml",
                             "--training.steps=10", "--job.description=two words", "plain"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string port;
  for (int rank = 0; rank < 3; ++rank) {
    const std::vector<std::string> lines = RankLines(r.output, rank);
    ASSERT_EQ(lines.size(), 6u) << r.output;
    const std::string n = std::to_string(rank);
    EXPECT_EQ(lines[0], "env RANK=" + n + " LOCAL_RANK=" + n +
                            " WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 OMP=1 MKL=1");
    if (rank == 0) port = lines[1];
    EXPECT_EQ(lines[1], port) << "every rank must get the same MASTER_PORT";
    EXPECT_EQ(lines[2], "arg <job.toml>");
    EXPECT_EQ(lines[3], "arg <--training.steps=10>");
    EXPECT_EQ(lines[4], "arg <--job.description=two words>");
    EXPECT_EQ(lines[5], "arg <plain>");
  }
  const int picked = std::stoi(port.substr(5));
  EXPECT_GT(picked, 0);
  EXPECT_LE(picked, 65535);
  EXPECT_NE(r.output.find("ringtrain-run: all 3 ranks finished in "), std::string::npos);
}

TEST(LauncherTest, ThreadsPerRankReplacesInheritedThreadVariables) {
  TempDir dir;
  const std::string trainer =
      WriteScript(dir, "trainer.sh",
                  "echo \"OMP=$OMP_NUM_THREADS MKL=$MKL_NUM_THREADS PORT=$MASTER_PORT "
                  "MARK=$RINGTRAIN_LAUNCHER_TEST_MARK\"\n");
  setenv("OMP_NUM_THREADS", "7", 1);
  setenv("RINGTRAIN_LAUNCHER_TEST_MARK", "inherited", 1);
  const auto r = RunCommand({Launcher(), "--nproc=1", "--threads-per-rank=3", "--master-port=29123",
                             "--trainer=" + trainer, "job.toml"});
  unsetenv("OMP_NUM_THREADS");
  unsetenv("RINGTRAIN_LAUNCHER_TEST_MARK");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(RankLines(r.output, 0),
            std::vector<std::string>{"OMP=3 MKL=3 PORT=29123 MARK=inherited"});
}

TEST(LauncherTest, LinesArePrefixedByRankOnTheStreamTheyCameFrom) {
  TempDir dir;
  const std::string trainer = WriteScript(dir, "trainer.sh",
                                          "echo \"out one\"\n"
                                          "echo \"err one\" >&2\n"
                                          "printf 'out partial'\n");
  Subprocess launcher = StartCommand({Launcher(), "--nproc", "2", "--trainer", trainer, "job.toml"},
                                     dir / "stdout", dir / "stderr");
  ASSERT_EQ(WaitCommand(launcher), 0) << ReadFile(dir / "stderr");
  const std::string out = ReadFile(dir / "stdout"), err = ReadFile(dir / "stderr");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(RankLines(out, rank), (std::vector<std::string>{"out one", "out partial"})) << out;
    EXPECT_EQ(RankLines(err, rank), std::vector<std::string>{"err one"}) << err;
  }
  for (const std::string& line : Lines(out)) EXPECT_EQ(line.rfind("[rank ", 0), 0u) << line;
  EXPECT_NE(err.find("ringtrain-run: all 2 ranks finished in "), std::string::npos) << err;
}

TEST(LauncherTest, FailingRankStopsTheOthersAndTheirChildrenQuickly) {
  TempDir dir;
  const std::string trainer = WriteScript(
      dir, "trainer.sh",
      "if [ \"$RANK\" = 1 ]; then\n" + WaitForPidFilesThenExit(dir, "$((WORLD_SIZE - 1))", 3) +
          "fi\n" + RecordPidsAndSleep(dir));
  const auto start = Clock::now();
  const auto r = RunCommand({Launcher(), "--nproc", "3", "--trainer", trainer, "job.toml"});
  const double seconds = SecondsSince(start);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_LT(seconds, 20) << r.output;
  const size_t reason = r.output.find("[rank 1] rank 1 giving up");
  const size_t verdict =
      r.output.find("ringtrain-run: rank 1 exited with status 3; stopping the other ranks");
  ASSERT_NE(reason, std::string::npos) << r.output;
  ASSERT_NE(verdict, std::string::npos) << r.output;
  EXPECT_LT(reason, verdict) << "a rank's last words come before the launcher's verdict";
  EXPECT_EQ(r.output.find("finished"), std::string::npos) << r.output;
  for (int rank : {0, 2}) {
    const std::string n = std::to_string(rank);
    ExpectAllGone(
        {std::stoi(ReadFile(dir / ("pid." + n))), std::stoi(ReadFile(dir / ("child." + n)))});
  }
}

TEST(LauncherTest, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir;
  const std::string trainer = WriteScript(dir, "trainer.sh",
                                          "trap '' TERM\n"
                                          "echo $$ > \"" +
                                              dir.path() +
                                              "/pid.$RANK\"\n"
                                              "if [ \"$RANK\" = 1 ]; then\n" +
                                              WaitForPidFilesThenExit(dir, "$WORLD_SIZE", 3) +
                                              "fi\n"
                                              "sleep 60\n");
  const auto start = Clock::now();
  const auto r = RunCommand(
      {Launcher(), "--nproc", "2", "--grace-seconds", "1", "--trainer", trainer, "job.toml"});
  const double seconds = SecondsSince(start);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_GE(seconds, 1.0) << r.output;
  EXPECT_LT(seconds, 20) << r.output;
  EXPECT_NE(r.output.find("ringtrain-run: rank 0 still running 1 s after SIGTERM; sending SIGKILL"),
            std::string::npos)
      << r.output;
  ExpectAllGone({std::stoi(ReadFile(dir / "pid.0"))});
}

TEST(LauncherTest, RankKilledBySignalIsReportedByName) {
  TempDir dir;
  const std::string trainer = WriteScript(dir, "trainer.sh", "kill -KILL $$\n");
  const auto r = RunCommand({Launcher(), "--nproc", "1", "--trainer", trainer, "job.toml"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ringtrain-run: rank 0 was killed by signal SIGKILL\n"),
            std::string::npos)
      << r.output;
}

// Sends `signo` to a launcher whose two ranks sleep, and checks that everything stops.
void ExpectSignalStopsAllRanks(int signo, const std::string& name, int exit_code) {
  TempDir dir;
  const std::string trainer = WriteScript(dir, "trainer.sh", RecordPidsAndSleep(dir));
  const auto start = Clock::now();
  Subprocess launcher =
      StartCommand({Launcher(), "--nproc", "2", "--trainer", trainer, "job.toml"}, dir / "output");
  const std::vector<pid_t> shells = WaitForPids(dir, "pid", 2);
  const std::vector<pid_t> children = WaitForPids(dir, "child", 2);
  launcher.Signal(signo);  // its process group holds the launcher alone: the ranks have their own
  EXPECT_EQ(WaitCommand(launcher), exit_code) << ReadFile(dir / "output");
  EXPECT_LT(SecondsSince(start), 20);
  EXPECT_NE(ReadFile(dir / "output").find("ringtrain-run: got " + name + "; stopping all ranks"),
            std::string::npos)
      << ReadFile(dir / "output");
  ExpectAllGone(shells);
  ExpectAllGone(children);
}

TEST(LauncherTest, SigintStopsAllRanksAndExits130) {
  ExpectSignalStopsAllRanks(SIGINT, "SIGINT", 130);
}

TEST(LauncherTest, SigtermStopsAllRanksAndExits143) {
  ExpectSignalStopsAllRanks(SIGTERM, "SIGTERM", 143);
}

TEST(LauncherTest, MissingTrainerIsReportedWithItsPath) {
  TempDir dir;
  const std::string missing = dir / "no-such-trainer";
  const auto r = RunCommand({Launcher(), "--nproc", "2", "--trainer", missing, "job.toml"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ringtrain-run: cannot execute trainer '" + missing +
                          "': No such file or directory"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("exited with status 127"), std::string::npos) << r.output;
}

TEST(LauncherTest, RunsTheRealTrainerBesideItForOneRank) {
  const auto r =
      RunCommand({Launcher(), "--nproc", "1", ConfigPath("debug_model.toml"), "--training.steps=2",
                  "--lr_scheduler.warmup_steps=1", "--lr_scheduler.decay_ratio=0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> lines = RankLines(r.output, 0);
  int step_lines = 0;
  for (const std::string& line : lines) step_lines += line.find("step 2/2") != std::string::npos;
  EXPECT_EQ(step_lines, 1) << r.output;
  EXPECT_NE(r.output.find("ringtrain-run: all 1 ranks finished in "), std::string::npos);
}

}  // namespace
}  // namespace ringtrain::testing
