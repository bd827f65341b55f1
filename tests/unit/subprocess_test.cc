// Subprocess: exit codes, a clean start (stdin, signal mask and dispositions, environment,
// redirects), stopping a whole process group with SIGTERM → grace → SIGKILL, and the errors.
// The children are /bin/sh scripts and coreutils, so every case runs in milliseconds.
#include "common/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using ::ringtrain::testing::IsRunning;
using ::ringtrain::testing::ReadFile;
using ::ringtrain::testing::TempDir;
using ::ringtrain::testing::WaitFor;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

Subprocess MustStart(const SpawnOptions& options) {
  absl::StatusOr<Subprocess> child = Subprocess::Start(options);
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : Subprocess();
}

// `script` run by /bin/sh, its stdout and stderr into `out`.
Subprocess Shell(const std::string& script, const std::string& out) {
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.stdout_to = Redirect::ToFile(out);
  options.stderr_to = Redirect::ToStdout();
  return MustStart(options);
}

// The pid the script wrote into `path` ("123\n"), once it is all there; -1 after 5 s.
pid_t PidFrom(const std::string& path) {
  std::string text;
  if (!WaitFor([&] { return !(text = ReadFile(path)).empty() && text.back() == '\n'; }, 5)) {
    return -1;
  }
  return std::stoi(text);
}

TEST(SubprocessTest, ExitCodeIsTheExitStatus) {
  TempDir dir;
  Subprocess child = Shell("exit 3", dir / "out");
  EXPECT_GT(child.pid(), 0);
  EXPECT_EQ(child.Wait(), 3);
  EXPECT_FALSE(child.running());
  EXPECT_EQ(child.exit_code(), 3);
  ASSERT_TRUE(child.wait_status().has_value());
  EXPECT_TRUE(WIFEXITED(*child.wait_status()));
  EXPECT_EQ(child.Poll(), 3);  // reaped once; asked again, the same answer
}

TEST(SubprocessTest, KilledBySignalIs128PlusTheSignal) {
  TempDir dir;
  Subprocess child = Shell("kill -USR1 $$; sleep 5", dir / "out");
  EXPECT_EQ(child.Wait(), 128 + SIGUSR1);
  ASSERT_TRUE(child.wait_status().has_value());
  EXPECT_TRUE(WIFSIGNALED(*child.wait_status()));
  EXPECT_EQ(WTERMSIG(*child.wait_status()), SIGUSR1);
  EXPECT_EQ(ExitCode(*child.wait_status()), 128 + SIGUSR1);
}

TEST(SubprocessTest, RunsInItsOwnProcessGroupWithStdinFromDevNull) {
  TempDir dir;
  Subprocess child = Shell(
      "cat; echo \"read done\"; readlink /proc/$$/fd/0; cut -d' ' -f5 /proc/$$/stat", dir / "out");
  ASSERT_EQ(child.Wait(), 0) << ReadFile(dir / "out");
  EXPECT_EQ(ReadFile(dir / "out"), "read done\n/dev/null\n" + std::to_string(child.pid()) + "\n");
}

TEST(SubprocessTest, SignalMaskAndDispositionsAreResetInTheChild) {
  TempDir dir;
  // The test process blocks SIGTERM and ignores SIGINT and SIGPIPE; its children must not.
  sigset_t term, saved_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &saved_mask), 0);
  struct sigaction ignore {
  }, saved_int{}, saved_pipe{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, &saved_int);
  sigaction(SIGPIPE, &ignore, &saved_pipe);

  SpawnOptions status;
  status.argv = {"/bin/grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"};
  status.stdout_to = Redirect::ToFile(dir / "status");
  Subprocess grep = MustStart(status);
  SpawnOptions sleep;
  sleep.argv = {"/bin/sleep", "30"};
  Subprocess terminated = MustStart(sleep);
  Subprocess interrupted = MustStart(sleep);
  const std::optional<int> grep_exit = grep.Wait();
  terminated.Signal(SIGTERM);
  interrupted.Signal(SIGINT);
  const std::optional<int> term_exit = terminated.Wait(milliseconds(5000));
  const std::optional<int> int_exit = interrupted.Wait(milliseconds(5000));

  sigaction(SIGINT, &saved_int, nullptr);
  sigaction(SIGPIPE, &saved_pipe, nullptr);
  pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  EXPECT_EQ(grep_exit, 0);
  EXPECT_EQ(ReadFile(dir / "status"), "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
  EXPECT_EQ(term_exit, 128 + SIGTERM);
  EXPECT_EQ(int_exit, 128 + SIGINT);
}

TEST(SubprocessTest, EnvironmentEntriesReplaceInheritedOnes) {
  TempDir dir;
  setenv("RINGTRAIN_SUBPROCESS_TEST_A", "inherited", 1);
  setenv("RINGTRAIN_SUBPROCESS_TEST_B", "inherited", 1);
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c",
                  "echo \"$RINGTRAIN_SUBPROCESS_TEST_A $RINGTRAIN_SUBPROCESS_TEST_B "
                  "$RINGTRAIN_SUBPROCESS_TEST_C\"; env | grep -c '^RINGTRAIN_SUBPROCESS_TEST_A='"};
  options.env = {"RINGTRAIN_SUBPROCESS_TEST_A=set", "RINGTRAIN_SUBPROCESS_TEST_C=new"};
  options.stdout_to = Redirect::ToFile(dir / "out");
  Subprocess child = MustStart(options);
  const std::optional<int> code = child.Wait();
  unsetenv("RINGTRAIN_SUBPROCESS_TEST_A");
  unsetenv("RINGTRAIN_SUBPROCESS_TEST_B");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(ReadFile(dir / "out"), "set inherited new\n1\n");
}

TEST(SubprocessTest, RedirectsToFilesAndDescriptors) {
  TempDir dir;
  testing::WriteFile(dir / "log", "kept\n");
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", "echo out; echo err >&2"};
  options.stdout_to = Redirect::ToFile(dir / "log", /*append=*/true);
  options.stderr_to = Redirect::ToFd(fds[1]);
  Subprocess child = MustStart(options);
  close(fds[1]);
  std::string piped;
  char buffer[256];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) piped.append(buffer, n);
  close(fds[0]);
  EXPECT_EQ(child.Wait(), 0);
  EXPECT_EQ(ReadFile(dir / "log"), "kept\nout\n");
  EXPECT_EQ(piped, "err\n");
}

TEST(SubprocessTest, WaitWithATimeoutLeavesARunningChildAlone) {
  SpawnOptions options;
  options.argv = {"/bin/sleep", "30"};
  Subprocess child = MustStart(options);
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(child.Wait(milliseconds(100)), std::nullopt);
  EXPECT_GE(Clock::now() - start, milliseconds(100));
  EXPECT_EQ(child.Poll(), std::nullopt);
  EXPECT_TRUE(child.running());
  EXPECT_TRUE(IsRunning(child.pid()));
  EXPECT_EQ(child.Stop(milliseconds(5000)), 128 + SIGTERM);
  EXPECT_FALSE(child.Signal(SIGTERM)) << "no signal once reaped";
}

TEST(SubprocessTest, StopEscalatesToSigkillAfterTheGrace) {
  TempDir dir;
  Subprocess child = Shell(
      "trap '' TERM; echo $$ > " + (dir / "pid") + "; while :; do sleep 0.1; done", dir / "out");
  ASSERT_EQ(PidFrom(dir / "pid"), child.pid());  // the trap is set
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(child.Stop(milliseconds(300)), 128 + SIGKILL);
  const Clock::duration took = Clock::now() - start;
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, milliseconds(3000));
}

TEST(SubprocessTest, StopEndsTheWholeGroup) {
  TempDir dir;
  // One grandchild that dies of SIGTERM, one that ignores it: both go.
  Subprocess child =
      Shell("sleep 30 & echo $! > " + (dir / "plain") +
                "\n(trap '' TERM; exec sleep 30) & echo $! > " + (dir / "deaf") + "\nwait",
            dir / "out");
  const pid_t plain = PidFrom(dir / "plain"), deaf = PidFrom(dir / "deaf");
  ASSERT_GT(plain, 0);
  ASSERT_GT(deaf, 0);
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(child.Stop(milliseconds(5000)), 128 + SIGTERM);
  EXPECT_LT(Clock::now() - start, milliseconds(3000)) << "the shell itself obeys SIGTERM";
  EXPECT_TRUE(WaitFor([&] { return !IsRunning(plain) && !IsRunning(deaf); }, 5))
      << "grandchildren left running: " << plain << " " << deaf;
}

TEST(SubprocessTest, KillGroupOnExitTakesWhatTheChildLeftBehind) {
  TempDir dir;
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", "sleep 30 & echo $! > " + (dir / "left")};
  options.kill_group_on_exit = true;
  Subprocess child = MustStart(options);
  const pid_t left = PidFrom(dir / "left");
  ASSERT_GT(left, 0);
  EXPECT_EQ(child.Wait(), 0);
  EXPECT_TRUE(WaitFor([&] { return !IsRunning(left); }, 5)) << left << " left running";
}

TEST(SubprocessTest, DestroyingARunningChildKillsIt) {
  pid_t pid;
  {
    SpawnOptions options;
    options.argv = {"/bin/sleep", "30"};
    Subprocess child = MustStart(options);
    pid = child.pid();
    Subprocess moved = std::move(child);
    EXPECT_FALSE(child.running());  // NOLINT(bugprone-use-after-move): moved-from holds nothing
    EXPECT_EQ(moved.pid(), pid);
  }
  EXPECT_FALSE(IsRunning(pid));
  EXPECT_NE(kill(pid, 0), 0) << "reaped, not only dead";
}

TEST(SubprocessTest, AProgramThatCannotRunExits127SayingWhy) {
  TempDir dir;
  SpawnOptions options;
  options.argv = {dir / "no-such-program", "arg"};
  options.stderr_to = Redirect::ToFile(dir / "err");
  Subprocess missing = MustStart(options);
  EXPECT_EQ(missing.Wait(), 127);
  EXPECT_EQ(ReadFile(dir / "err"),
            "cannot execute '" + (dir / "no-such-program") + "': No such file or directory\n");

  testing::WriteFile(dir / "plain.txt", "not a program\n");
  options.argv = {dir / "plain.txt"};
  options.exec_error_prefix = "tool: cannot run plain.txt: ";
  Subprocess not_executable = MustStart(options);
  EXPECT_EQ(not_executable.Wait(), 127);
  EXPECT_EQ(ReadFile(dir / "err"), "tool: cannot run plain.txt: Permission denied\n");
}

TEST(SubprocessTest, StartErrorsNameTheProblem) {
  TempDir dir;
  SpawnOptions empty;
  absl::StatusOr<Subprocess> child = Subprocess::Start(empty);
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.status().code(), absl::StatusCode::kInvalidArgument);

  SpawnOptions unwritable;
  unwritable.argv = {"/bin/true"};
  unwritable.stdout_to = Redirect::ToFile(dir / "no-such-dir/out.log");
  child = Subprocess::Start(unwritable);
  ASSERT_FALSE(child.ok());
  EXPECT_EQ(child.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(child.status().message().find(dir / "no-such-dir/out.log"), std::string::npos)
      << child.status();

  SpawnOptions stdout_to_stdout;
  stdout_to_stdout.argv = {"/bin/true"};
  stdout_to_stdout.stdout_to = Redirect::ToStdout();
  EXPECT_EQ(Subprocess::Start(stdout_to_stdout).status().code(),
            absl::StatusCode::kInvalidArgument);

  Subprocess none;
  EXPECT_EQ(none.pid(), -1);
  EXPECT_EQ(none.Poll(), std::nullopt);
  EXPECT_EQ(none.Wait(), std::nullopt);
  EXPECT_FALSE(none.Signal(SIGTERM));
}

}  // namespace
}  // namespace ringtrain
