// What JobStore::Open checks before it trusts a file: SQLite's quick_check (a damaged file or one
// that is not a database is DATA_LOSS naming it), and the stamp beside it (a store that went
// missing, was emptied or is an older copy is FAILED_PRECONDITION naming the stamp and the job
// count), with JobStoreOptions::new_store (--new-store) taking the store as it is.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "coordinator/job_store.h"
#include "coordinator/store_stamp.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::WriteFile;

bool Contains(absl::string_view text, const std::string& part) {
  return text.find(part) != absl::string_view::npos;
}

JobRecord SampleJob() {
  JobRecord job;
  job.name = "sample";
  job.config_toml = "[training]\nsteps = 2\n";
  job.world_size = 1;
  job.dp = 1;
  job.cp = 1;
  job.total_steps = 2;
  return job;
}

JobStoreOptions NewStore() {
  JobStoreOptions options;
  options.new_store = true;
  return options;
}

class JobStoreOpenTest : public ::testing::Test {
 protected:
  // Opens the store at db_, creates `jobs` jobs and closes it (its WAL checkpointed into the file).
  void MakeStore(int jobs) { MakeStoreAt(db_, jobs); }
  void MakeStoreAt(const std::string& path, int jobs) {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < jobs; ++i) ASSERT_TRUE((*store)->CreateJob(SampleJob()).ok());
  }

  void RemoveDb() {
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db_ + suffix);
  }

  int64_t StampedNext() {
    auto stamp = ReadStoreStamp(stamp_);
    EXPECT_TRUE(stamp.ok() && stamp->has_value()) << stamp.status();
    return stamp.ok() && stamp->has_value() ? (*stamp)->next_job_number : -1;
  }

  // Overwrites the file from byte `from` to its end with pseudo-random bytes.
  void Scribble(const std::string& path, std::streamoff from) {
    const auto size = static_cast<std::streamoff>(fs::file_size(path));
    ASSERT_GT(size, from) << path;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(from);
    std::mt19937 random(7);
    for (std::streamoff i = from; i < size; ++i) f.put(static_cast<char>(random()));
  }

  TempDir dir_;
  const std::string db_ = dir_ / "ringtrain.db";
  const std::string stamp_ = db_ + ".stamp";
};

TEST_F(JobStoreOpenTest, AFirstStartWritesTheStampAndCreateJobKeepsItCurrent) {
  auto store = JobStore::Open(db_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(StampedNext(), 1);
  ASSERT_TRUE((*store)->CreateJob(SampleJob()).ok());
  ASSERT_TRUE((*store)->CreateJob(SampleJob()).ok());
  EXPECT_EQ(StampedNext(), 3);
  store->reset();
  auto again = JobStore::Open(db_);  // a normal restart
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->ListJobs()->size(), 2u);
}

TEST_F(JobStoreOpenTest, AStampThatLagsIsAcceptedAndBroughtUpToDate) {
  MakeStore(3);
  // A crash between the commit of job 3 and its stamp write leaves the stamp at 2 jobs.
  ASSERT_TRUE(WriteStoreStamp(stamp_, {3, 0}).ok());
  auto store = JobStore::Open(db_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(StampedNext(), 4);
}

TEST_F(JobStoreOpenTest, AStoreWithoutAStampIsTakenAndStamped) {
  MakeStore(2);
  fs::remove(stamp_);  // a store from before stamps
  auto store = JobStore::Open(db_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(StampedNext(), 3);
}

TEST_F(JobStoreOpenTest, AMissingStoreIsRefusedAndNotCreated) {
  MakeStore(2);
  RemoveDb();
  auto store = JobStore::Open(db_);
  ASSERT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  const absl::string_view message = store.status().message();
  EXPECT_TRUE(Contains(message, "job store '" + db_ + "' is missing")) << message;
  EXPECT_TRUE(Contains(message, "its stamp '" + stamp_ + "' says it held 2 jobs")) << message;
  EXPECT_TRUE(Contains(message, "the last job-000002")) << message;
  EXPECT_TRUE(Contains(message, "Restore it from a backup, or start with --new-store to begin a "
                                "new, empty store.")) << message;
  EXPECT_FALSE(fs::exists(db_));  // refused before SQLite could create an empty file
  EXPECT_EQ(StampedNext(), 3);   // and the stamp still says what was lost
}

TEST_F(JobStoreOpenTest, AnEmptiedStoreIsRefused) {
  MakeStore(2);
  // Truncated to nothing (SQLite reads that as a new database).
  RemoveDb();
  WriteFile(db_, "");
  auto store = JobStore::Open(db_);
  ASSERT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_TRUE(Contains(store.status().message(), "job store '" + db_ + "' holds no jobs, but its "
                                                 "stamp '" + stamp_ + "' says it held 2 jobs"))
      << store.status();
  EXPECT_TRUE(Contains(store.status().message(), "--new-store to take it as it is"));

  // Replaced by a fresh store made elsewhere.
  const std::string fresh = dir_ / "fresh.db";
  MakeStoreAt(fresh, 0);
  RemoveDb();
  fs::rename(fresh, db_);
  store = JobStore::Open(db_);
  ASSERT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_TRUE(Contains(store.status().message(), "holds no jobs")) << store.status();
}

TEST_F(JobStoreOpenTest, AnOlderCopyWithFewerJobsIsRefused) {
  MakeStore(1);
  fs::copy_file(db_, dir_ / "backup.db");
  {
    auto store = JobStore::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->CreateJob(SampleJob()).ok());
    ASSERT_TRUE((*store)->CreateJob(SampleJob()).ok());
  }
  RemoveDb();
  fs::copy_file(dir_ / "backup.db", db_);
  auto store = JobStore::Open(db_);
  ASSERT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  const absl::string_view message = store.status().message();
  EXPECT_TRUE(Contains(message, "job store '" + db_ + "' holds 1 job (the last job-000001), but "
                                "its stamp '" + stamp_ + "' says it held 3 jobs (the last "
                                "job-000003")) << message;
  EXPECT_TRUE(Contains(message, "job ids from job-000002 again")) << message;

  // --new-store takes it as it is, and the stamp follows it.
  auto taken = JobStore::Open(db_, Clock::Real(), NewStore());
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*(*taken)->NextJobNumber(), 2);
  EXPECT_EQ(StampedNext(), 2);
  taken->reset();
  EXPECT_TRUE(JobStore::Open(db_).ok());  // and the next plain start is a normal one
}

TEST_F(JobStoreOpenTest, NewStoreStartsAnEmptyStoreWhereTheFileIsMissing) {
  MakeStore(2);
  RemoveDb();
  auto store = JobStore::Open(db_, Clock::Real(), NewStore());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->ListJobs()->empty());
  EXPECT_EQ(StampedNext(), 1);
  auto job = (*store)->CreateJob(SampleJob());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job_id, "job-000001");
  EXPECT_EQ(StampedNext(), 2);
  store->reset();
  EXPECT_TRUE(JobStore::Open(db_).ok());
}

TEST_F(JobStoreOpenTest, AnInvalidStampIsRefusedUnlessNewStore) {
  MakeStore(2);
  WriteFile(stamp_, "{\"next_job_number\": \"many\"}");
  auto store = JobStore::Open(db_);
  ASSERT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_TRUE(Contains(store.status().message(), "store stamp '" + stamp_ + "' is not valid: "
                                                 "next_job_number is missing"))
      << store.status();
  EXPECT_TRUE(Contains(store.status().message(), db_)) << store.status();
  EXPECT_TRUE(Contains(store.status().message(), "--new-store")) << store.status();

  store = JobStore::Open(db_, Clock::Real(), NewStore());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->ListJobs()->size(), 2u);
  EXPECT_EQ(StampedNext(), 3);
}

TEST_F(JobStoreOpenTest, ADamagedStoreIsRefusedNamingTheFile) {
  MakeStore(5);
  ASSERT_GE(fs::file_size(db_), 3u * 4096) << "the store should span several pages";
  ASSERT_FALSE(fs::exists(db_ + "-wal"));  // closed: everything is in the file
  Scribble(db_, 4096);                     // pages 2..N (page 1 holds the header and the schema)
  for (const JobStoreOptions& options : {JobStoreOptions(), NewStore()}) {
    auto store = JobStore::Open(db_, Clock::Real(), options);
    ASSERT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
    const absl::string_view message = store.status().message();
    EXPECT_TRUE(Contains(message, "job store '" + db_ + "' is damaged: SQLite says \""))
        << message;
    EXPECT_TRUE(Contains(message, "PRAGMA quick_check found: Page ")) << message;
    EXPECT_TRUE(Contains(message, "Restore it from a backup, or move it away (with its -wal and "
                                  "-shm files) and start with --new-store")) << message;
    EXPECT_FALSE(Contains(message, "\n")) << message;
    EXPECT_LT(message.size(), 1200u) << message;
  }
}

TEST_F(JobStoreOpenTest, AFileOfRandomBytesIsRefusedAsNotADatabase) {
  MakeStore(1);
  Scribble(db_, 0);
  auto store = JobStore::Open(db_);
  ASSERT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_TRUE(Contains(store.status().message(), "job store '" + db_ + "' is damaged"))
      << store.status();
  EXPECT_TRUE(Contains(store.status().message(), "file is not a database")) << store.status();
}

TEST_F(JobStoreOpenTest, InMemoryStoresHaveNoStamp) {
  auto store = JobStore::Open("file:job_store_open_test?mode=memory&cache=shared");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->CreateJob(SampleJob()).ok());
  EXPECT_FALSE(fs::exists("file:job_store_open_test?mode=memory&cache=shared.stamp"));
  EXPECT_TRUE(JobStore::Open(":memory:").ok());
  EXPECT_FALSE(fs::exists(":memory:.stamp"));
}

}  // namespace
}  // namespace ringtrain
