// WorkDirLock (one holder per folder; trainers never inherit it) and StopLeftoverTrainers against
// planted trainer.pid files: a live trainer (with a process it started) is killed, a dead one's
// file is removed, a live process whose start time differs from the record is left alone.
#include "worker/agent/work_dir_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "tests/integration/test_util.h"
#include "worker/agent/trainer_pid_file.h"

namespace ringtrain {
namespace {

using ::ringtrain::testing::IsRunning;
using ::ringtrain::testing::TempDir;
using ::ringtrain::testing::WaitFor;
using std::chrono::milliseconds;

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

Subprocess MustStart(std::vector<std::string> argv) {
  SpawnOptions options;
  options.argv = std::move(argv);
  absl::StatusOr<Subprocess> child = Subprocess::Start(options);
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : Subprocess();
}

// Plants <work>/<job>/rank-<rank>/trainer.pid holding `record`; returns its path.
std::string Plant(const std::string& work, const std::string& job, int rank,
                  const TrainerPidRecord& record) {
  const std::string dir = absl::StrCat(work, "/", job, "/rank-", rank);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/trainer.pid";
  EXPECT_TRUE(WriteTrainerPidFile(path, record).ok());
  return path;
}

TEST(WorkDirLockTest, OneHolderAtATimeNamingTheHolder) {
  TempDir dir;
  Subprocess child;
  {
    absl::StatusOr<WorkDirLock> first = WorkDirLock::Acquire(dir.path());
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(first->path(), dir / "agent.lock");
    EXPECT_EQ(testing::ReadFile(dir / "agent.lock"), absl::StrCat(getpid(), "\n"));

    // flock locks belong to an open file, so a second open in the same process is refused too.
    const absl::Status second = WorkDirLock::Acquire(dir.path()).status();
    EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(second.message().find("work dir '" + dir.path() + "'"), std::string::npos) << second;
    EXPECT_NE(second.message().find(absl::StrCat("pid ", getpid())), std::string::npos) << second;
    EXPECT_NE(second.message().find("--work-dir"), std::string::npos) << second;

    // Started while the lock is held; waited for until it has exec'd (a forked child shares the
    // lock until its exec closes the descriptor).
    child = MustStart({"/bin/sh", "-c", "touch " + dir / "started" + "; exec sleep 30"});
    ASSERT_TRUE(WaitFor([&] { return access((dir / "started").c_str(), F_OK) == 0; }, 5));
  }
  // Released with its object, although the child still runs: it never inherited the lock.
  const absl::Status again = WorkDirLock::Acquire(dir.path()).status();
  EXPECT_TRUE(again.ok()) << again;
  child.Stop(milliseconds(0));
}

TEST(WorkDirLockTest, MissingFolderIsAnError) {
  TempDir dir;
  const absl::Status s = WorkDirLock::Acquire(dir / "missing").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find(dir / "missing/agent.lock"), std::string::npos) << s;
}

TEST(StopLeftoverTrainersTest, KillsLiveOnesRemovesStaleOnesSparesOthers) {
  TempDir dir;
  const std::string work = dir / "work";

  // A leftover trainer: a shell that started a process of its own (in its group) and waits.
  Subprocess leftover =
      MustStart({"/bin/sh", "-c", "sleep 30 & echo $! > " + dir / "grandchild" + "; wait"});
  ASSERT_TRUE(WaitFor([&] { return testing::ReadFile(dir / "grandchild").size() > 1; }, 5));
  const pid_t grandchild = std::stoi(testing::ReadFile(dir / "grandchild"));
  const std::string live_file = Plant(work, "job-a", 1, *RecordOf(leftover.pid()));

  // A trainer that is gone.
  Subprocess dead = MustStart({"/bin/sleep", "30"});
  const TrainerPidRecord dead_record = *RecordOf(dead.pid());
  dead.Stop(milliseconds(0));
  const std::string dead_file = Plant(work, "job-b", 0, dead_record);

  // A live process with the record's pid but another start time: the pid was reused.
  Subprocess bystander = MustStart({"/bin/sleep", "30"});
  TrainerPidRecord reused = *RecordOf(bystander.pid());
  reused.start_time -= 1;
  const std::string reused_file = Plant(work, "job-c", 2, reused);

  // Garbage, and a file outside the layout (never looked at).
  std::filesystem::create_directories(work + "/job-d/rank-0");
  testing::WriteFile(work + "/job-d/rank-0/trainer.pid", "nonsense\n");
  const std::string elsewhere = Plant(work, "checkpoints", 0, *RecordOf(bystander.pid()));
  std::filesystem::rename(work + "/checkpoints/rank-0", work + "/checkpoints/step-0");

  const std::vector<LeftoverTrainer> stopped = StopLeftoverTrainers(work, milliseconds(5000));
  ASSERT_EQ(stopped.size(), 1u);
  EXPECT_EQ(stopped[0].job_id, "job-a");
  EXPECT_EQ(stopped[0].rank, 1);
  EXPECT_EQ(stopped[0].pid, leftover.pid());
  EXPECT_TRUE(stopped[0].ended);
  EXPECT_EQ(leftover.Wait(milliseconds(2000)), 128 + SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return !IsRunning(grandchild); }, 2)) << "its group was not killed";

  EXPECT_FALSE(Exists(live_file));
  EXPECT_FALSE(Exists(dead_file));
  EXPECT_FALSE(Exists(reused_file));
  EXPECT_FALSE(Exists(work + "/job-d/rank-0/trainer.pid"));
  EXPECT_TRUE(Exists(work + "/checkpoints/step-0/trainer.pid"));
  EXPECT_TRUE(IsRunning(bystander.pid()));
  bystander.Stop(milliseconds(0));
}

TEST(StopLeftoverTrainersTest, NoWorkDirIsNothingToDo) {
  TempDir dir;
  EXPECT_TRUE(StopLeftoverTrainers(dir / "missing").empty());
  EXPECT_TRUE(StopLeftoverTrainers(dir.path()).empty());
}

}  // namespace
}  // namespace ringtrain
