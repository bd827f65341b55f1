// Opening the job store: the checks a file passes before it is trusted (job_store.h), and the job
// counter. The operations are in job_store_jobs.cc (jobs and their state changes),
// job_store_steps.cc (step events) and job_store_workers.cc (workers); a job's row in
// job_store_rows.cc; the tables in job_store_schema.cc; what opening checks of a file's records in
// job_store_check.cc. SQLite's C API stays in sqlite_db.cc.
#include "coordinator/job_store.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "coordinator/job_store_check.h"
#include "coordinator/job_store_schema.h"
#include "coordinator/sqlite_db.h"

namespace ringtrain {
namespace {

// The refusal of a store at `path` that is damaged or lost records; `finding` says what is wrong.
// --new-store never takes such a file, so the remedy moves it away first.
absl::Status Damaged(const std::string& path, absl::string_view finding) {
  return absl::DataLossError(absl::StrCat(
      "job store '", path, "' is damaged: ", finding,
      ". Restore it from a backup, or move it away (with its -wal and -shm files) and start "
      "with --new-store to begin a new, empty store."));
}

// An error of opening the store at `path`; a file SQLite finds damaged (DATA_LOSS, sqlite_db.h)
// says what to do about it.
absl::Status OpenError(const std::string& path, const absl::Status& s) {
  if (s.code() != absl::StatusCode::kDataLoss) {
    return absl::Status(s.code(), absl::StrCat("job store '", path, "': ", s.message()));
  }
  return Damaged(path, absl::StrCat("SQLite says \"", s.message(), "\""));
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path, Clock* clock,
                                                         const JobStoreOptions& options) {
  bool in_memory = path == ":memory:" || path.rfind("file:", 0) == 0;
  if (!in_memory) {
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot open job store '", path, "': directory '", dir.string(),
                       "' does not exist; create it or choose another path"));
    }
  }
  RT_ASSIGN_OR_RETURN(StoreStampKeeper stamp,
                      StoreStampKeeper::BeforeOpen(path, options.new_store));
  absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path, absl::Seconds(5));
  if (!db.ok()) {
    if (db.status().code() == absl::StatusCode::kDataLoss) return OpenError(path, db.status());
    return absl::Status(db.status().code(), absl::StrCat("cannot open job store '", path,
                                                         "': ", db.status().message()));
  }
  std::unique_ptr<JobStore> store(new JobStore(std::move(*db), path, clock, std::move(stamp)));
  {
    absl::MutexLock lock(&store->mu_);
    if (absl::Status s = store->db_->QuickCheck(); !s.ok()) return OpenError(path, s);
    // journal_mode answers "memory" for an in-memory database; that is fine. Every commit is
    // synced (FULL), so the stamp CreateJob writes after one never runs ahead of the store.
    for (const char* sql :
         {"PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL", "PRAGMA foreign_keys = ON"}) {
      absl::Status s = store->db_->Exec(sql);
      if (!s.ok()) return OpenError(path, s);
    }
    // A sound file may still have lost tables or rows (dropped or deleted by hand, a tool, a
    // partial restore): refused like damage, before the stamp compares the counter it keeps.
    absl::StatusOr<std::string> lost = PrepareSchema(*store->db_);
    if (!lost.ok()) return OpenError(path, lost.status());
    if (!lost->empty()) return Damaged(path, *lost);
    absl::StatusOr<int64_t> next = store->NextJobNumberLocked();
    if (!next.ok()) return OpenError(path, next.status());
    lost = FindLostRecords(*store->db_, *next);
    if (!lost.ok()) return OpenError(path, lost.status());
    if (!lost->empty()) return Damaged(path, *lost);
    RT_RETURN_IF_ERROR(store->stamp_.AfterOpen(*next, store->NowUnixMs()));
  }
  return store;
}

JobStore::JobStore(std::unique_ptr<SqliteDb> db, std::string path, Clock* clock,
                   StoreStampKeeper stamp)
    : db_(std::move(db)), path_(std::move(path)), clock_(clock), stamp_(std::move(stamp)) {}

JobStore::~JobStore() = default;

absl::StatusOr<int64_t> JobStore::NextJobNumberLocked() {
  Statement s(*db_, "SELECT value FROM counters WHERE name = 'next_job_number'");
  RT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::InternalError(absl::StrCat("job store '", path_, "' has no job counter"));
  return s.Int(0);
}

absl::StatusOr<int64_t> JobStore::NextJobNumber() {
  absl::MutexLock lock(&mu_);
  return NextJobNumberLocked();
}

}  // namespace ringtrain
