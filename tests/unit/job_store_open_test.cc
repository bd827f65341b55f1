// What JobStore::Open checks before it trusts a file: SQLite's quick_check (a damaged file or one
// that is not a database is DATA_LOSS naming it), the tables and records a sound file may still
// have lost (a table, job rows, step events: DATA_LOSS naming them), and the stamp beside it (a
// store that went missing, was emptied or is an older copy is FAILED_PRECONDITION naming the stamp
// and the job count), with JobStoreOptions::new_store (--new-store) taking the store as it is.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "coordinator/job_store.h"
#include "coordinator/sqlite_db.h"
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
  job.degrees = {1, 1, 1};  // world, dp, cp
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

  // Runs `sql` on the closed store at db_, as a person or a tool might.
  void Sql(const std::string& sql) {
    auto db = SqliteDb::Open(db_, absl::Seconds(5));
    ASSERT_TRUE(db.ok()) << db.status();
    ASSERT_TRUE((*db)->Exec(sql).ok()) << sql;
  }

  // Opens db_ (plain, then with --new-store) expecting the refusal of a damaged store; returns
  // what it found, the text between "is damaged: " and the remedy.
  std::string ExpectDamaged() {
    std::string finding;
    for (const JobStoreOptions& options : {JobStoreOptions(), NewStore()}) {
      auto store = JobStore::Open(db_, Clock::Real(), options);
      EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
      const std::string message(store.status().message());
      const std::string head = "job store '" + db_ + "' is damaged: ";
      const std::string remedy =
          ". Restore it from a backup, or move it away (with its -wal and -shm files) and start "
          "with --new-store to begin a new, empty store.";
      EXPECT_EQ(message.rfind(head, 0), 0u) << message;
      EXPECT_TRUE(message.size() > head.size() + remedy.size() &&
                  message.compare(message.size() - remedy.size(), remedy.size(), remedy) == 0)
          << message;
      EXPECT_FALSE(Contains(message, "\n")) << message;
      if (message.size() > head.size() + remedy.size()) {
        finding = message.substr(head.size(), message.size() - head.size() - remedy.size());
      }
    }
    return finding;
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
  EXPECT_TRUE(Contains(message,
                       "Restore it from a backup, or start with --new-store to begin a "
                       "new, empty store."))
      << message;
  EXPECT_FALSE(fs::exists(db_));  // refused before SQLite could create an empty file
  EXPECT_EQ(StampedNext(), 3);    // and the stamp still says what was lost
}

TEST_F(JobStoreOpenTest, AnEmptiedStoreIsRefused) {
  MakeStore(2);
  // Truncated to nothing (SQLite reads that as a new database).
  RemoveDb();
  WriteFile(db_, "");
  auto store = JobStore::Open(db_);
  ASSERT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_TRUE(Contains(store.status().message(), "job store '" + db_ +
                                                     "' holds no jobs, but its "
                                                     "stamp '" +
                                                     stamp_ + "' says it held 2 jobs"))
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
  EXPECT_TRUE(Contains(message, "job store '" + db_ +
                                    "' holds 1 job (the last job-000001), but "
                                    "its stamp '" +
                                    stamp_ +
                                    "' says it held 3 jobs (the last "
                                    "job-000003"))
      << message;
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
  EXPECT_TRUE(Contains(store.status().message(), "store stamp '" + stamp_ +
                                                     "' is not valid: "
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
    EXPECT_TRUE(Contains(message, "job store '" + db_ + "' is damaged: SQLite says \"")) << message;
    EXPECT_TRUE(Contains(message, "PRAGMA quick_check found: Page ")) << message;
    EXPECT_TRUE(Contains(message,
                         "Restore it from a backup, or move it away (with its -wal and "
                         "-shm files) and start with --new-store"))
        << message;
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

// The probe's store: its newest jobs deleted, the counter and the stamp intact.
TEST_F(JobStoreOpenTest, AStoreThatLostItsNewestJobsIsRefused) {
  MakeStore(8);
  Sql("DELETE FROM jobs WHERE job_number > 5");
  EXPECT_EQ(ExpectDamaged(),
            "it lacks 3 of the 8 jobs its job counter says it took: job-000006 to job-000008");
  EXPECT_EQ(StampedNext(), 9);  // the stamp still says what the store held
}

TEST_F(JobStoreOpenTest, JobsLostAnywhereAreNamedAsRangesThenCounted) {
  MakeStore(12);
  Sql("DELETE FROM jobs WHERE job_number IN (2, 4, 6, 7, 9, 11)");
  EXPECT_EQ(ExpectDamaged(),
            "it lacks 6 of the 12 jobs its job counter says it took: job-000002, job-000004, "
            "job-000006 to job-000007 and 2 more");
  Sql("DELETE FROM jobs WHERE job_number != 12");
  EXPECT_EQ(ExpectDamaged(),
            "it lacks 11 of the 12 jobs its job counter says it took: job-000001 to job-000011");
}

TEST_F(JobStoreOpenTest, ACounterBehindItsJobsIsRefused) {
  MakeStore(5);
  Sql("UPDATE counters SET value = 3 WHERE name = 'next_job_number'");
  EXPECT_EQ(ExpectDamaged(),
            "it holds job-000005, but its job counter says the next job is job-000003: the "
            "counter went back, and taking it would hand out job ids again");
  Sql("DELETE FROM counters");
  EXPECT_EQ(ExpectDamaged(),
            "it lacks its job counter (the row next_job_number of the table counters)");
}

TEST_F(JobStoreOpenTest, AMissingTableIsRefusedAndNotMadeAgain) {
  const std::pair<const char*, const char*> tables[] = {
      {"counters", "the job counter"},
      {"jobs", "the jobs"},
      {"state_changes", "the jobs' state changes"},
      {"step_events", "the jobs' step events"},
      {"checkpoints", "the jobs' checkpoints"},
      {"workers", "the workers' credential digests"},
  };
  for (const auto& [table, holds] : tables) {
    SCOPED_TRACE(table);
    RemoveDb();
    fs::remove(stamp_);
    MakeStore(2);
    Sql(std::string("DROP TABLE ") + table);
    EXPECT_EQ(ExpectDamaged(), std::string("it lacks the table ") + table + " (" + holds + ")");
    auto db = SqliteDb::Open(db_, absl::Seconds(5));
    ASSERT_TRUE(db.ok());
    Statement still(**db, "SELECT 1 FROM sqlite_master WHERE name = ?");
    still.Bind(1, std::string(table));
    EXPECT_FALSE(*still.Step()) << table << " was made again";
  }
  // Every table gone, the schema version left: not a new store.
  RemoveDb();
  fs::remove(stamp_);
  MakeStore(0);
  Sql("DROP TABLE counters; DROP TABLE state_changes; DROP TABLE step_events; "
      "DROP TABLE checkpoints; DROP TABLE jobs; DROP TABLE workers");
  EXPECT_EQ(ExpectDamaged(),
            "it lacks the tables counters (the job counter), jobs (the jobs), state_changes (the "
            "jobs' state changes), step_events (the jobs' step events), checkpoints (the jobs' "
            "checkpoints), workers (the workers' credential digests)");
}

// A job with `steps` step events 1..steps that ran to the end.
void RunJob(JobStore& store, int steps) {
  auto job = store.CreateJob(SampleJob());
  ASSERT_TRUE(job.ok()) << job.status();
  for (JobState to : {JobState::kAssigned, JobState::kRunning}) {
    ASSERT_TRUE(store.TransitionJob(job->job_id, to, "").ok());
  }
  for (int step = 1; step <= steps; ++step) {
    StepEvent e{job->job_id, step, 1.0, 0.1,
                3e-4,        100,  0.5, "{\"step\":" + std::to_string(step) + "}"};
    ASSERT_TRUE(*store.AppendStepEvent(e));
  }
  ASSERT_TRUE(store.TransitionJob(job->job_id, JobState::kSucceeded, "").ok());
}

TEST_F(JobStoreOpenTest, AFinishedJobThatLostStepEventsIsRefused) {
  {
    auto store = JobStore::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_NO_FATAL_FAILURE(RunJob(**store, 10));
    ASSERT_NO_FATAL_FAILURE(RunJob(**store, 3));
  }
  ASSERT_TRUE(JobStore::Open(db_).ok());  // sound
  Sql("DELETE FROM step_events WHERE job_id = 'job-000001' AND step BETWEEN 4 AND 6");
  EXPECT_EQ(ExpectDamaged(),
            "1 job lost step events: job-000001 holds 7 of the 10 step events it took (steps 4-6 "
            "of 1-10 missing)");
  Sql("DELETE FROM step_events WHERE job_id = 'job-000001' AND step = 10");
  EXPECT_EQ(ExpectDamaged(),
            "1 job lost step events: job-000001 holds 6 of the 10 step events it took (steps 4-6 "
            "and 10 of 1-10 missing)");
}

TEST_F(JobStoreOpenTest, EmptiedStepEventsNameTheFirstJobsAndCountTheRest) {
  {
    auto store = JobStore::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 5; ++i) ASSERT_NO_FATAL_FAILURE(RunJob(**store, 2));
    ASSERT_TRUE((*store)->CreateJob(SampleJob()).ok());  // queued: no steps, nothing to lose
  }
  Sql("DELETE FROM step_events");
  EXPECT_EQ(ExpectDamaged(),
            "5 jobs lost step events: job-000001 holds 0 of the 2 step events it took (steps 1-2 "
            "of 1-2 missing); job-000002 holds 0 of the 2 step events it took (steps 1-2 of 1-2 "
            "missing); job-000003 holds 0 of the 2 step events it took (steps 1-2 of 1-2 "
            "missing); and 2 more jobs");
}

// Steps that never arrived (a restart resumed after its checkpoint, reports of a lost worker that
// were never acknowledged) are not damage: only events the store took and then lost are.
TEST_F(JobStoreOpenTest, StepsThatNeverArrivedAreNotDamage) {
  {
    auto store = JobStore::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    auto job = (*store)->CreateJob(SampleJob());
    ASSERT_TRUE(job.ok());
    for (int step : {1, 2, 6, 7, 5}) {
      ASSERT_TRUE(*(*store)->AppendStepEvent({job->job_id, step, 1.0, 0, 0, 0, 0, "{}"}));
    }
    EXPECT_FALSE(*(*store)->AppendStepEvent({job->job_id, 6, 1.0, 0, 0, 0, 0, "{}"}));  // again
  }
  auto store = JobStore::Open(db_);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->GetJob("job-000001")->last_step, 7);
}

// The first release's schema, before the workers table, restart_json and step_event_count (and
// before PRAGMA user_version recorded one).
constexpr const char* kFirstSchema = R"sql(
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO counters (name, value) VALUES ('next_job_number', 1);
CREATE TABLE jobs (
  job_number INTEGER PRIMARY KEY, job_id TEXT NOT NULL UNIQUE, name TEXT NOT NULL,
  state TEXT NOT NULL, config_toml TEXT NOT NULL, overrides_json TEXT NOT NULL,
  world_size INTEGER NOT NULL, dp INTEGER NOT NULL, cp INTEGER NOT NULL, mesh_json TEXT NOT NULL,
  wait_reason TEXT NOT NULL, error_json TEXT, submitted_unix_ms INTEGER NOT NULL,
  started_unix_ms INTEGER NOT NULL, finished_unix_ms INTEGER NOT NULL,
  total_steps INTEGER NOT NULL, last_step INTEGER NOT NULL, last_loss REAL,
  device_kind TEXT NOT NULL DEFAULT 'cpu');
CREATE TABLE state_changes (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL REFERENCES jobs (job_id),
  from_state TEXT NOT NULL, to_state TEXT NOT NULL, message TEXT NOT NULL,
  unix_ms INTEGER NOT NULL);
CREATE INDEX state_changes_by_job ON state_changes (job_id, seq);
CREATE TABLE step_events (
  job_id TEXT NOT NULL REFERENCES jobs (job_id), step INTEGER NOT NULL, loss REAL,
  grad_norm REAL, lr REAL, tokens_per_second REAL, step_seconds REAL,
  record_json TEXT NOT NULL, PRIMARY KEY (job_id, step)) WITHOUT ROWID;
INSERT INTO jobs VALUES (1, 'job-000001', 'old', 'SUCCEEDED', '', '[]', 1, 1, 1, '[]', '', NULL,
                         1, 2, 3, 3, 3, 0.5, 'cpu');
UPDATE counters SET value = 2;
INSERT INTO state_changes (job_id, from_state, to_state, message, unix_ms)
  VALUES ('job-000001', 'QUEUED', 'QUEUED', 'submitted', 1);
INSERT INTO step_events VALUES ('job-000001', 1, 0.7, 0, 0, 0, 0, '{}'),
                               ('job-000001', 2, 0.6, 0, 0, 0, 0, '{}'),
                               ('job-000001', 3, 0.5, 0, 0, 0, 0, '{}');
)sql";

TEST_F(JobStoreOpenTest, AStoreOfAnOlderCoordinatorGainsWhatItLacks) {
  Sql(kFirstSchema);
  {
    auto store = JobStore::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->GetJob("job-000001")->last_step, 3);
    EXPECT_TRUE((*store)->PutWorkerCredential("worker-1", "digest").ok());
    EXPECT_EQ(*(*store)->NextJobNumber(), 2);
  }
  auto store = JobStore::Open(db_);  // now a store of this version: its counts were filled in
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->WorkerCredential("worker-1"), "digest");
  store->reset();
  Sql("DELETE FROM step_events WHERE step = 2");
  EXPECT_EQ(ExpectDamaged(),
            "1 job lost step events: job-000001 holds 2 of the 3 step events it took (step 2 of "
            "1-3 missing)");
}

TEST_F(JobStoreOpenTest, AnOlderStoreMissingATableItAlwaysHadIsRefused) {
  Sql(kFirstSchema);
  Sql("DROP TABLE step_events");
  EXPECT_EQ(ExpectDamaged(), "it lacks the table step_events (the jobs' step events)");
  // Its lost newest events show in its last step, which the rows no longer reach.
  RemoveDb();
  Sql(kFirstSchema);
  Sql("DELETE FROM step_events WHERE step = 3");
  EXPECT_EQ(ExpectDamaged(),
            "1 job lost step events: job-000001 holds step events up to step 2, not up to its "
            "last step 3 (step 3 of 1-3 missing)");
}

}  // namespace
}  // namespace ringtrain
