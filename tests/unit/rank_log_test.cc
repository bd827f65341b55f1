// rank.log's records (worker/agent/rank_log.h): format, parse, reads by offset and tail, the
// writer's cut of long lines; and the prune rule for rank folders (rank_dirs.h).
#include "worker/agent/rank_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/integration/test_util.h"
#include "worker/agent/rank_dirs.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

TEST(RankLogTest, FormatsAndParsesARecord) {
  const absl::Time t = absl::FromUnixMicros(1764674756123456);  // 2025-12-02T11:25:56.123456Z
  const std::string line = FormatRankLogLine(t, "stderr", "I 11:25:56.123 step 1  loss 5.5");
  EXPECT_EQ(line, "2025-12-02T11:25:56.123456Z stderr I 11:25:56.123 step 1  loss 5.5\n");
  const RankLogLine parsed = ParseRankLogLine(line.substr(0, line.size() - 1));
  EXPECT_EQ(parsed.time_unix_micros, 1764674756123456);
  EXPECT_EQ(parsed.stream, "stderr");
  EXPECT_EQ(parsed.text, "I 11:25:56.123 step 1  loss 5.5");
  // Empty text, and a line that is not a record (an older log) comes back whole.
  EXPECT_EQ(ParseRankLogLine("2025-12-02T11:25:56.123456Z stdout ").text, "");
  const RankLogLine old = ParseRankLogLine("plain trainer output");
  EXPECT_EQ(old.time_unix_micros, 0);
  EXPECT_EQ(old.stream, "");
  EXPECT_EQ(old.text, "plain trainer output");
}

class RankLogFileTest : public ::testing::Test {
 protected:
  std::string Append(int lines, const std::string& stream = "stdout") {
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    RankLogWriter writer(fd);
    for (int i = 0; i < lines; ++i) writer.Write(stream, "line " + std::to_string(next_++));
    close(fd);
    return path_;
  }
  testing::TempDir dir_;
  std::string path_ = dir_ / "rank.log";
  int next_ = 0;
};

TEST_F(RankLogFileTest, ReadsWholeLinesFromAnOffsetInChunks) {
  Append(100);
  int64_t offset = 0;
  int seen = 0;
  for (int chunks = 0; chunks < 100; ++chunks) {
    absl::StatusOr<RankLogRead> read = ReadRankLog(path_, offset, 200);  // a few lines each
    ASSERT_TRUE(read.ok()) << read.status();
    ASSERT_FALSE(read->lines.empty());
    EXPECT_EQ(read->lines.front().offset, offset);
    int64_t previous = -1;
    for (const RankLogLine& line : read->lines) {
      EXPECT_EQ(line.text, "line " + std::to_string(seen));
      EXPECT_EQ(line.stream, "stdout");
      EXPECT_GT(line.offset, previous);
      previous = line.offset;
      ++seen;
    }
    // The next read starts right after the last line.
    EXPECT_GT(read->next_offset, read->lines.back().offset);
    offset = read->next_offset;
    if (read->at_end) break;
  }
  EXPECT_EQ(seen, 100);
  EXPECT_EQ(offset, static_cast<int64_t>(fs::file_size(path_)));
  // At the end: nothing, at_end. New lines appended later are read from there.
  absl::StatusOr<RankLogRead> end = ReadRankLog(path_, offset, 1 << 20);
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(end->lines.empty());
  EXPECT_TRUE(end->at_end);
  Append(1);
  end = ReadRankLog(path_, offset, 1 << 20);
  ASSERT_TRUE(end.ok());
  ASSERT_EQ(end->lines.size(), 1u);
  EXPECT_EQ(end->lines[0].text, "line 100");
}

TEST_F(RankLogFileTest, APartialLastLineWaitsForItsNewline) {
  Append(2);
  {
    const int fd = open(path_.c_str(), O_WRONLY | O_APPEND);
    ASSERT_EQ(write(fd, "2025-12-02T11:25:56.123456Z stdout half", 39), 39);
    close(fd);
  }
  absl::StatusOr<RankLogRead> read = ReadRankLog(path_, 0, 1 << 20);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->lines.size(), 2u);
  EXPECT_FALSE(read->at_end);
}

TEST_F(RankLogFileTest, TailOffsetFindsTheLastLines) {
  Append(10);
  absl::StatusOr<int64_t> tail = RankLogTailOffset(path_, 3);
  ASSERT_TRUE(tail.ok()) << tail.status();
  absl::StatusOr<RankLogRead> read = ReadRankLog(path_, *tail, 1 << 20);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->lines.size(), 3u);
  EXPECT_EQ(read->lines[0].text, "line 7");
  EXPECT_EQ(read->lines[2].text, "line 9");
  EXPECT_EQ(*RankLogTailOffset(path_, 50), 0);  // fewer lines than asked: all of them
  EXPECT_EQ(*RankLogTailOffset(path_, 0), static_cast<int64_t>(fs::file_size(path_)));
}

TEST_F(RankLogFileTest, ErrorsNameTheFile) {
  EXPECT_TRUE(absl::IsNotFound(ReadRankLog(dir_ / "none.log", 0, 100).status()));
  EXPECT_TRUE(absl::IsNotFound(RankLogTailOffset(dir_ / "none.log", 3).status()));
  Append(1);
  const absl::Status past = ReadRankLog(path_, 1 << 20, 100).status();
  EXPECT_TRUE(absl::IsInvalidArgument(past));
  EXPECT_NE(past.message().find(path_), std::string::npos) << past;
}

TEST_F(RankLogFileTest, LongLinesAreCutIntoRecords) {
  const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  RankLogWriter writer(fd);
  writer.Write("stderr", std::string(kMaxRankLogText * 2 + 5, 'x'));
  close(fd);
  absl::StatusOr<RankLogRead> read = ReadRankLog(path_, 0, 1 << 20);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->lines.size(), 3u);
  EXPECT_EQ(read->lines[0].text.size(), kMaxRankLogText);
  EXPECT_EQ(read->lines[2].text, "xxxxx");
  // A read smaller than one line still returns that line.
  read = ReadRankLog(path_, 0, 10);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->lines.size(), 1u);
}

// Makes <work>/<job>/rank-<r>/rank.log with its modification time `age_seconds` ago.
void MakeRankDir(const std::string& work, const std::string& job, int rank, int age_seconds) {
  const fs::path dir = fs::path(work) / job / ("rank-" + std::to_string(rank));
  fs::create_directories(dir);
  testing::WriteFile((dir / "rank.log").string(), "x\n");
  const auto when = fs::file_time_type::clock::now() - std::chrono::seconds(age_seconds);
  fs::last_write_time(dir / "rank.log", when);
  fs::last_write_time(dir, when);
}

TEST(RankDirsTest, KeepsTheNewestRankFoldersAndNothingElse) {
  testing::TempDir work;
  MakeRankDir(work.path(), "job-000001", 0, 500);  // oldest
  MakeRankDir(work.path(), "job-000002", 1, 400);
  MakeRankDir(work.path(), "job-000003", 0, 300);
  MakeRankDir(work.path(), "job-000003", 2, 200);
  MakeRankDir(work.path(), "job-000004", 0, 600);  // older still, but about to be used again
  // Not rank folders: the checkpoint root (even with a rank-like folder inside), other files.
  fs::create_directories(work / "checkpoints/job-000001/rank-0");
  testing::WriteFile(work / "agent.lock", "1\n");
  fs::create_directories(work / "job-000001/notes");

  const std::vector<std::string> removed =
      PruneRankDirs(work.path(), 2, work / "job-000004/rank-0", work / "checkpoints");
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_FALSE(fs::exists(work / "job-000001/rank-0"));
  EXPECT_FALSE(fs::exists(work / "job-000002"));       // emptied: removed with its only rank
  EXPECT_TRUE(fs::exists(work / "job-000001/notes"));  // its job folder is not empty
  EXPECT_TRUE(fs::exists(work / "job-000003/rank-0"));
  EXPECT_TRUE(fs::exists(work / "job-000003/rank-2"));
  EXPECT_TRUE(fs::exists(work / "job-000004/rank-0"));
  EXPECT_TRUE(fs::exists(work / "checkpoints/job-000001/rank-0"));
  EXPECT_TRUE(fs::exists(work / "agent.lock"));
  // Within the limit (three rank folders left): nothing goes.
  EXPECT_TRUE(PruneRankDirs(work.path(), 3, "", work / "checkpoints").empty());
}

TEST(RankDirsTest, AFolderWhoseTrainerMayRunIsKept) {
  testing::TempDir work;
  MakeRankDir(work.path(), "job-000001", 0, 500);
  testing::WriteFile(work / "job-000001/rank-0/trainer.pid", "pid=1\n");
  MakeRankDir(work.path(), "job-000001", 0, 500);  // the oldest again after the write
  MakeRankDir(work.path(), "job-000002", 0, 100);
  EXPECT_TRUE(PruneRankDirs(work.path(), 1, "", "").empty());
  EXPECT_TRUE(fs::exists(work / "job-000001/rank-0"));
}

}  // namespace
}  // namespace ringtrain
