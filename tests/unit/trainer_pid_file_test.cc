// trainer.pid records: /proc/<pid>/stat parsed as proc(5) lays it out, written and read back, and
// a record told apart from a later process that got the same pid.
#include "worker/agent/trainer_pid_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using ::ringtrain::testing::TempDir;

TEST(ProcessStatTest, ParsesAroundACommandNameWithSpacesAndParentheses) {
  // Fields 1..22 of proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt
  // majflt cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime.
  const std::optional<ProcessStat> stat = ParseProcessStat(
      "4242 (a) b (c)) S 1 4200 4200 0 -1 4194560 10 0 0 0 1 2 0 0 20 0 1 0 987654 1234 56\n");
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->state, 'S');
  EXPECT_EQ(stat->pgid, 4200);
  EXPECT_EQ(stat->start_time, 987654u);
  EXPECT_FALSE(ParseProcessStat("4242 (x) S 1 2 3").has_value());
  EXPECT_FALSE(ParseProcessStat("").has_value());
}

TEST(ProcessStatTest, ThisProcess) {
  const std::optional<ProcessStat> stat = ReadProcessStat(getpid());
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->state, 'R');
  EXPECT_EQ(stat->pgid, getpgrp());
  EXPECT_GT(stat->start_time, 0u);
  EXPECT_FALSE(BootId().empty());
}

TEST(TrainerPidFileTest, RoundTripAndStillRuns) {
  TempDir dir;
  SpawnOptions sleep;
  sleep.argv = {"/bin/sleep", "30"};
  absl::StatusOr<Subprocess> child = Subprocess::Start(sleep);
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<TrainerPidRecord> record = RecordOf(child->pid());
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->pgid, child->pid());  // a Subprocess leads its own group

  const std::string path = dir / "trainer.pid";
  ASSERT_TRUE(WriteTrainerPidFile(path, *record).ok());
  EXPECT_EQ(testing::ReadFile(path),
            absl::StrCat("pid=", record->pid, " pgid=", record->pgid,
                         " start_time=", record->start_time, " boot_id=", BootId(), "\n"));
  absl::StatusOr<TrainerPidRecord> read = ReadTrainerPidFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->pid, record->pid);
  EXPECT_EQ(read->pgid, record->pgid);
  EXPECT_EQ(read->start_time, record->start_time);
  EXPECT_EQ(read->boot_id, record->boot_id);
  EXPECT_TRUE(StillRuns(*read));

  TrainerPidRecord later = *read;  // the same pid, started at another time: another process
  later.start_time += 1;
  EXPECT_FALSE(StillRuns(later));
  TrainerPidRecord other_boot = *read;
  other_boot.boot_id = "00000000-0000-0000-0000-000000000000";
  EXPECT_FALSE(StillRuns(other_boot));

  child->Signal(SIGKILL);
  EXPECT_TRUE(testing::WaitFor([&] { return !StillRuns(*read); }, 5));  // a zombie counts as gone
  child->Wait();
  EXPECT_FALSE(StillRuns(*read));
  EXPECT_EQ(RecordOf(child->pid()).status().code(), absl::StatusCode::kNotFound);
}

TEST(TrainerPidFileTest, MissingOrGarbledFile) {
  TempDir dir;
  EXPECT_EQ(ReadTrainerPidFile(dir / "none").status().code(), absl::StatusCode::kNotFound);
  testing::WriteFile(dir / "bad", "pid=12 pgid=x\n");
  const absl::Status bad = ReadTrainerPidFile(dir / "bad").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.message().find(dir / "bad"), std::string::npos) << bad;
}

}  // namespace
}  // namespace ringtrain
