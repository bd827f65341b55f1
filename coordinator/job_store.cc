#include "coordinator/job_store.h"

#include <sqlite3.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace ringtrain {
namespace {

// Lists (overrides, mesh) and the error are JSON columns: they are always read and written whole.
// REAL columns may be NULL: SQLite has no NaN, so a NaN (a diverged loss) is stored as NULL.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS counters (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
INSERT OR IGNORE INTO counters (name, value) VALUES ('next_job_number', 1);
CREATE TABLE IF NOT EXISTS jobs (
  job_number        INTEGER PRIMARY KEY,
  job_id            TEXT NOT NULL UNIQUE,
  name              TEXT NOT NULL,
  state             TEXT NOT NULL,
  config_toml       TEXT NOT NULL,
  overrides_json    TEXT NOT NULL,
  world_size        INTEGER NOT NULL,
  dp                INTEGER NOT NULL,
  cp                INTEGER NOT NULL,
  mesh_json         TEXT NOT NULL,
  wait_reason       TEXT NOT NULL,
  error_json        TEXT,
  submitted_unix_ms INTEGER NOT NULL,
  started_unix_ms   INTEGER NOT NULL,
  finished_unix_ms  INTEGER NOT NULL,
  total_steps       INTEGER NOT NULL,
  last_step         INTEGER NOT NULL,
  last_loss         REAL,
  device_kind       TEXT NOT NULL DEFAULT 'cpu'
);
CREATE TABLE IF NOT EXISTS state_changes (
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id     TEXT NOT NULL REFERENCES jobs (job_id),
  from_state TEXT NOT NULL,
  to_state   TEXT NOT NULL,
  message    TEXT NOT NULL,
  unix_ms    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS state_changes_by_job ON state_changes (job_id, seq);
CREATE TABLE IF NOT EXISTS step_events (
  job_id            TEXT NOT NULL REFERENCES jobs (job_id),
  step              INTEGER NOT NULL,
  loss              REAL,
  grad_norm         REAL,
  lr                REAL,
  tokens_per_second REAL,
  step_seconds      REAL,
  record_json       TEXT NOT NULL,
  PRIMARY KEY (job_id, step)
) WITHOUT ROWID;
)sql";

constexpr const char* kJobColumns =
    "job_id, name, state, config_toml, overrides_json, world_size, dp, cp, mesh_json, wait_reason, "
    "error_json, submitted_unix_ms, started_unix_ms, finished_unix_ms, total_steps, last_step, "
    "last_loss, device_kind";

int64_t NowUnixMs() { return absl::ToUnixMillis(absl::Now()); }

absl::Status SqliteError(sqlite3* db, int rc, const std::string& what) {
  std::string text =
      absl::StrCat(what, ": ", db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
                   " (sqlite code ", rc, ")");
  int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return absl::UnavailableError(text);
  return absl::InternalError(text);
}

// One prepared statement; values are always bound, never spliced into the SQL text.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
    sql_ = sql;
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  absl::Status status() const {
    return rc_ == SQLITE_OK ? absl::OkStatus()
                            : SqliteError(db_, rc_, absl::StrCat("prepare ", sql_));
  }
  Statement& Bind(int i, int64_t v) { return Check(sqlite3_bind_int64(stmt_, i, v)); }
  Statement& Bind(int i, int v) { return Bind(i, static_cast<int64_t>(v)); }
  Statement& Bind(int i, double v) {
    return Check(std::isnan(v) ? sqlite3_bind_null(stmt_, i) : sqlite3_bind_double(stmt_, i, v));
  }
  Statement& Bind(int i, const std::string& v) {
    return Check(
        sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Statement& BindNull(int i) { return Check(sqlite3_bind_null(stmt_, i)); }

  // True when a row is ready, false when done.
  absl::StatusOr<bool> Step() {
    RT_RETURN_IF_ERROR(status());
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(db_, rc, sql_);
  }
  absl::Status Run() {
    RT_ASSIGN_OR_RETURN(bool row, Step());
    (void)row;
    return absl::OkStatus();
  }

  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const {
    return IsNull(col) ? std::numeric_limits<double>::quiet_NaN()
                       : sqlite3_column_double(stmt_, col);
  }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Text(int col) const {
    const unsigned char* p = sqlite3_column_text(stmt_, col);
    return p == nullptr
               ? std::string()
               : std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, col));
  }

 private:
  Statement& Check(int rc) {
    if (rc_ == SQLITE_OK && rc != SQLITE_OK) rc_ = rc;
    return *this;
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
  std::string sql_;
};

// BEGIN IMMEDIATE … COMMIT; rolls back unless committed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {
    rc_ = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  }
  ~Transaction() {
    if (rc_ == SQLITE_OK && !done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  absl::Status status() const {
    return rc_ == SQLITE_OK ? absl::OkStatus() : SqliteError(db_, rc_, "begin transaction");
  }
  absl::Status Commit() {
    int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return SqliteError(db_, rc, "commit");
    done_ = true;
    return absl::OkStatus();
  }

 private:
  sqlite3* db_;
  int rc_;
  bool done_ = false;
};

std::string JobIdFor(int64_t number) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "job-%06lld", static_cast<long long>(number));
  return buf;
}

absl::StatusOr<JobState> ParseState(const std::string& name) {
  auto state = JobStateFromName(name);
  if (!state)
    return absl::InternalError(absl::StrCat("job store holds unknown job state '", name, "'"));
  return *state;
}

std::string OverridesJson(const std::vector<std::string>& overrides) {
  return nlohmann::json(overrides).dump();
}

std::string MeshJson(const std::vector<RankPlacement>& mesh) {
  nlohmann::json out = nlohmann::json::array();
  for (const RankPlacement& p : mesh) {
    out.push_back({{"rank", p.rank},
                   {"worker_id", p.worker_id},
                   {"cp_group", p.cp_group},
                   {"dp_index", p.dp_index}});
  }
  return out.dump();
}

std::string ErrorJson(const JobError& e) {
  return nlohmann::json{{"rank", e.rank},
                        {"worker_id", e.worker_id},
                        {"exit_status", e.exit_status},
                        {"stderr_tail", e.stderr_tail},
                        {"message", e.message}}
      .dump();
}

absl::StatusOr<nlohmann::json> ParseJsonColumn(const std::string& text, const char* column) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return absl::InternalError(absl::StrCat("job store column ", column, " is not JSON"));
  return j;
}

// Reads a row selected with kJobColumns.
absl::StatusOr<JobRecord> ReadJob(const Statement& s) {
  JobRecord job;
  job.job_id = s.Text(0);
  job.name = s.Text(1);
  RT_ASSIGN_OR_RETURN(job.state, ParseState(s.Text(2)));
  job.config_toml = s.Text(3);
  RT_ASSIGN_OR_RETURN(nlohmann::json overrides, ParseJsonColumn(s.Text(4), "overrides_json"));
  for (const auto& o : overrides) job.overrides.push_back(o.get<std::string>());
  job.world_size = static_cast<int>(s.Int(5));
  job.dp = static_cast<int>(s.Int(6));
  job.cp = static_cast<int>(s.Int(7));
  RT_ASSIGN_OR_RETURN(nlohmann::json mesh, ParseJsonColumn(s.Text(8), "mesh_json"));
  for (const auto& p : mesh) {
    job.mesh.push_back({p.value("rank", 0), p.value("worker_id", ""), p.value("cp_group", 0),
                        p.value("dp_index", 0)});
  }
  job.wait_reason = s.Text(9);
  if (!s.IsNull(10)) {
    RT_ASSIGN_OR_RETURN(nlohmann::json e, ParseJsonColumn(s.Text(10), "error_json"));
    job.error = JobError{e.value("rank", -1), e.value("worker_id", ""), e.value("exit_status", 0),
                         e.value("stderr_tail", ""), e.value("message", "")};
  }
  job.submitted_unix_ms = s.Int(11);
  job.started_unix_ms = s.Int(12);
  job.finished_unix_ms = s.Int(13);
  job.total_steps = s.Int(14);
  job.last_step = s.Int(15);
  job.last_loss = s.Double(16);
  job.device_kind = s.Text(17);
  return job;
}

absl::Status NotFound(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("no job '", job_id, "' in the job store"));
}

absl::Status InsertStateChange(sqlite3* db, const StateChange& c) {
  Statement s(db,
              "INSERT INTO state_changes (job_id, from_state, to_state, message, unix_ms) "
              "VALUES (?, ?, ?, ?, ?)");
  s.Bind(1, c.job_id)
      .Bind(2, std::string(JobStateName(c.from)))
      .Bind(3, std::string(JobStateName(c.to)));
  s.Bind(4, c.message).Bind(5, c.unix_ms);
  return s.Run();
}

}  // namespace

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued: return "QUEUED";
    case JobState::kAssigned: return "ASSIGNED";
    case JobState::kRunning: return "RUNNING";
    case JobState::kSucceeded: return "SUCCEEDED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCancelled: return "CANCELLED";
    case JobState::kRestarting: return "RESTARTING";
  }
  return "UNKNOWN";
}

std::optional<JobState> JobStateFromName(const std::string& name) {
  for (JobState s :
       {JobState::kQueued, JobState::kAssigned, JobState::kRunning, JobState::kSucceeded,
        JobState::kFailed, JobState::kCancelled, JobState::kRestarting}) {
    if (name == JobStateName(s)) return s;
  }
  return std::nullopt;
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

bool IsAllowedTransition(JobState from, JobState to) {
  using S = JobState;
  switch (from) {
    case S::kQueued: return to == S::kAssigned || to == S::kCancelled || to == S::kFailed;
    case S::kAssigned:
      return to == S::kRunning || to == S::kFailed || to == S::kCancelled || to == S::kQueued;
    case S::kRunning:
      return to == S::kSucceeded || to == S::kFailed || to == S::kCancelled || to == S::kRestarting;
    case S::kRestarting: return to == S::kAssigned || to == S::kFailed || to == S::kCancelled;
    default: return false;  // final states stay final
  }
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
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
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = absl::FailedPreconditionError(
        absl::StrCat("cannot open job store '", path,
                     "': ", db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close(db);
    return status;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  std::unique_ptr<JobStore> store(new JobStore(db, path));
  {
    absl::MutexLock lock(&store->mu_);
    // journal_mode answers "memory" for an in-memory database; that is fine.
    for (const char* sql : {"PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL",
                            "PRAGMA foreign_keys = ON", kSchema}) {
      absl::Status s = store->Exec(sql);
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat("job store '", path, "': ", s.message()));
      }
    }
  }
  return store;
}

JobStore::JobStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

JobStore::~JobStore() { sqlite3_close(db_); }

absl::Status JobStore::Exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return absl::OkStatus();
  std::string what = err != nullptr ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  return SqliteError(nullptr, rc, what);
}

absl::StatusOr<int64_t> JobStore::NextJobNumberLocked() {
  Statement s(db_, "SELECT value FROM counters WHERE name = 'next_job_number'");
  RT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::InternalError(absl::StrCat("job store '", path_, "' has no job counter"));
  return s.Int(0);
}

absl::StatusOr<int64_t> JobStore::NextJobNumber() {
  absl::MutexLock lock(&mu_);
  return NextJobNumberLocked();
}

absl::StatusOr<JobRecord> JobStore::CreateJob(JobRecord job) {
  absl::MutexLock lock(&mu_);
  Transaction tx(db_);
  RT_RETURN_IF_ERROR(tx.status());
  RT_ASSIGN_OR_RETURN(int64_t number, NextJobNumberLocked());
  job.job_id = JobIdFor(number);
  job.state = JobState::kQueued;
  job.submitted_unix_ms = NowUnixMs();
  job.started_unix_ms = job.finished_unix_ms = 0;
  job.last_step = 0;
  job.last_loss = 0;

  Statement insert(db_,
                   absl::StrCat("INSERT INTO jobs (job_number, ", kJobColumns,
                                ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
                       .c_str());
  insert.Bind(1, number)
      .Bind(2, job.job_id)
      .Bind(3, job.name)
      .Bind(4, std::string(JobStateName(job.state)));
  insert.Bind(5, job.config_toml).Bind(6, OverridesJson(job.overrides)).Bind(7, job.world_size);
  insert.Bind(8, job.dp).Bind(9, job.cp).Bind(10, MeshJson(job.mesh)).Bind(11, job.wait_reason);
  if (job.error) {
    insert.Bind(12, ErrorJson(*job.error));
  } else {
    insert.BindNull(12);
  }
  insert.Bind(13, job.submitted_unix_ms)
      .Bind(14, job.started_unix_ms)
      .Bind(15, job.finished_unix_ms);
  insert.Bind(16, job.total_steps).Bind(17, job.last_step).Bind(18, job.last_loss);
  insert.Bind(19, job.device_kind);
  RT_RETURN_IF_ERROR(insert.Run());

  Statement bump(db_, "UPDATE counters SET value = ? WHERE name = 'next_job_number'");
  bump.Bind(1, number + 1);
  RT_RETURN_IF_ERROR(bump.Run());
  RT_RETURN_IF_ERROR(InsertStateChange(
      db_, {job.job_id, JobState::kQueued, JobState::kQueued, "submitted", job.submitted_unix_ms}));
  RT_RETURN_IF_ERROR(tx.Commit());
  return job;
}

absl::StatusOr<JobRecord> JobStore::GetJobLocked(const std::string& job_id) {
  Statement s(db_, absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE job_id = ?").c_str());
  s.Bind(1, job_id);
  RT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return NotFound(job_id);
  return ReadJob(s);
}

absl::StatusOr<JobRecord> JobStore::GetJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return GetJobLocked(job_id);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListJobs() {
  absl::MutexLock lock(&mu_);
  Statement s(db_, absl::StrCat("SELECT ", kJobColumns, " FROM jobs ORDER BY job_number").c_str());
  std::vector<JobRecord> jobs;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    RT_ASSIGN_OR_RETURN(JobRecord job, ReadJob(s));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::Status JobStore::UpdateJob(const JobRecord& job) {
  absl::MutexLock lock(&mu_);
  Statement s(
      db_,
      "UPDATE jobs SET name = ?, config_toml = ?, overrides_json = ?, world_size = ?, dp = ?, "
      "cp = ?, mesh_json = ?, wait_reason = ?, error_json = ?, total_steps = ?, device_kind = ? "
      "WHERE job_id = ?");
  s.Bind(1, job.name).Bind(2, job.config_toml).Bind(3, OverridesJson(job.overrides));
  s.Bind(4, job.world_size).Bind(5, job.dp).Bind(6, job.cp).Bind(7, MeshJson(job.mesh));
  s.Bind(8, job.wait_reason);
  if (job.error) {
    s.Bind(9, ErrorJson(*job.error));
  } else {
    s.BindNull(9);
  }
  s.Bind(10, job.total_steps).Bind(11, job.device_kind).Bind(12, job.job_id);
  RT_RETURN_IF_ERROR(s.Run());
  if (sqlite3_changes(db_) == 0) return NotFound(job.job_id);
  return absl::OkStatus();
}

absl::StatusOr<StateChange> JobStore::TransitionJob(const std::string& job_id, JobState to,
                                                    const std::string& message) {
  absl::MutexLock lock(&mu_);
  Transaction tx(db_);
  RT_RETURN_IF_ERROR(tx.status());
  RT_ASSIGN_OR_RETURN(JobRecord job, GetJobLocked(job_id));
  if (!IsAllowedTransition(job.state, to)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", job_id, "' cannot move from ", JobStateName(job.state), " to ",
                     JobStateName(to), IsTerminal(job.state) ? " (a final state)" : ""));
  }
  StateChange change{job_id, job.state, to, message, NowUnixMs()};
  if (to == JobState::kRunning && job.started_unix_ms == 0) job.started_unix_ms = change.unix_ms;
  if (IsTerminal(to)) job.finished_unix_ms = change.unix_ms;
  Statement s(
      db_, "UPDATE jobs SET state = ?, started_unix_ms = ?, finished_unix_ms = ? WHERE job_id = ?");
  s.Bind(1, std::string(JobStateName(to)))
      .Bind(2, job.started_unix_ms)
      .Bind(3, job.finished_unix_ms);
  s.Bind(4, job_id);
  RT_RETURN_IF_ERROR(s.Run());
  RT_RETURN_IF_ERROR(InsertStateChange(db_, change));
  RT_RETURN_IF_ERROR(tx.Commit());
  return change;
}

absl::StatusOr<bool> JobStore::AppendStepEvent(const StepEvent& e) {
  absl::MutexLock lock(&mu_);
  Transaction tx(db_);
  RT_RETURN_IF_ERROR(tx.status());
  {
    Statement exists(db_, "SELECT 1 FROM jobs WHERE job_id = ?");
    exists.Bind(1, e.job_id);
    RT_ASSIGN_OR_RETURN(bool row, exists.Step());
    if (!row) return NotFound(e.job_id);
  }
  Statement insert(db_,
                   "INSERT OR IGNORE INTO step_events (job_id, step, loss, grad_norm, lr, "
                   "tokens_per_second, step_seconds, record_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  insert.Bind(1, e.job_id).Bind(2, e.step).Bind(3, e.loss).Bind(4, e.grad_norm).Bind(5, e.lr);
  insert.Bind(6, e.tokens_per_second).Bind(7, e.step_seconds).Bind(8, e.record_json);
  RT_RETURN_IF_ERROR(insert.Run());
  bool is_new = sqlite3_changes(db_) > 0;
  if (is_new) {
    Statement progress(
        db_, "UPDATE jobs SET last_step = ?, last_loss = ? WHERE job_id = ? AND last_step <= ?");
    progress.Bind(1, e.step).Bind(2, e.loss).Bind(3, e.job_id).Bind(4, e.step);
    RT_RETURN_IF_ERROR(progress.Run());
  }
  RT_RETURN_IF_ERROR(tx.Commit());
  return is_new;
}

absl::StatusOr<std::vector<StepEvent>> JobStore::StepEvents(const std::string& job_id,
                                                            int64_t from_step, int64_t limit) {
  absl::MutexLock lock(&mu_);
  RT_RETURN_IF_ERROR(GetJobLocked(job_id).status());
  Statement s(db_,
              "SELECT step, loss, grad_norm, lr, tokens_per_second, step_seconds, record_json "
              "FROM step_events WHERE job_id = ? AND step >= ? ORDER BY step LIMIT ?");
  s.Bind(1, job_id).Bind(2, from_step).Bind(3, limit > 0 ? limit : int64_t{-1});  // -1: no limit
  std::vector<StepEvent> events;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    events.push_back({job_id, s.Int(0), s.Double(1), s.Double(2), s.Double(3), s.Double(4),
                      s.Double(5), s.Text(6)});
  }
  return events;
}

absl::StatusOr<std::vector<StateChange>> JobStore::StateChanges(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  RT_RETURN_IF_ERROR(GetJobLocked(job_id).status());
  Statement s(db_,
              "SELECT from_state, to_state, message, unix_ms FROM state_changes WHERE job_id = ? "
              "ORDER BY seq");
  s.Bind(1, job_id);
  std::vector<StateChange> changes;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    RT_ASSIGN_OR_RETURN(JobState from, ParseState(s.Text(0)));
    RT_ASSIGN_OR_RETURN(JobState to, ParseState(s.Text(1)));
    changes.push_back({job_id, from, to, s.Text(2), s.Int(3)});
  }
  return changes;
}

}  // namespace ringtrain
