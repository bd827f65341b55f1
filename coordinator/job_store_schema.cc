#include "coordinator/job_store_schema.h"

#include <cstdint>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/sqlite_db.h"

namespace ringtrain {
namespace {

struct Table {
  const char* name;
  const char* holds;  // for the error that says it is missing
  // Added after the first release: a store from before the schema version may lack it.
  bool added_later;
  const char* create;  // run only where the table is absent
};

// Lists (overrides, mesh) and the error are JSON columns: they are always read and written whole.
// REAL columns may be NULL: SQLite has no NaN, so a NaN (a diverged loss) is stored as NULL.
// jobs.step_event_count counts the job's step_events rows as they are taken, so that rows lost
// later are told from steps that never arrived (a restart resumes after its checkpoint; reports
// of a lost worker that were never acknowledged leave gaps that are not damage).
constexpr Table kTables[] = {
    {"counters", "the job counter", false, R"sql(
CREATE TABLE counters (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
INSERT INTO counters (name, value) VALUES ('next_job_number', 1);
)sql"},
    {"jobs", "the jobs", false, R"sql(
CREATE TABLE jobs (
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
  device_kind       TEXT NOT NULL DEFAULT 'cpu',
  restart_json      TEXT NOT NULL DEFAULT '{}',
  step_event_count  INTEGER NOT NULL DEFAULT 0,
  load_json         TEXT NOT NULL DEFAULT '{}'
);
)sql"},
    {"state_changes", "the jobs' state changes", false, R"sql(
CREATE TABLE state_changes (
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id     TEXT NOT NULL REFERENCES jobs (job_id),
  from_state TEXT NOT NULL,
  to_state   TEXT NOT NULL,
  message    TEXT NOT NULL,
  unix_ms    INTEGER NOT NULL
);
)sql"},
    {"step_events", "the jobs' step events", false, R"sql(
CREATE TABLE step_events (
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
)sql"},
    {"checkpoints", "the jobs' checkpoints", true, R"sql(
CREATE TABLE checkpoints (
  job_id          TEXT NOT NULL REFERENCES jobs (job_id),
  step            INTEGER NOT NULL,
  complete        INTEGER NOT NULL,
  checkpoint_root TEXT NOT NULL,
  PRIMARY KEY (job_id, step)
) WITHOUT ROWID;
)sql"},
    {"workers", "the workers' credential digests", true, R"sql(
CREATE TABLE workers (
  worker_id          TEXT PRIMARY KEY,
  credential_sha256  TEXT NOT NULL,
  registered_unix_ms INTEGER NOT NULL
) WITHOUT ROWID;
)sql"},
};

// Indexes hold nothing that could be lost, so one that is missing is made again.
constexpr const char* kIndexes =
    "CREATE INDEX IF NOT EXISTS state_changes_by_job ON state_changes (job_id, seq)";

struct AddedColumn {
  const char* name;
  const char* definition;
  const char* fill;  // what sets it for the rows an older coordinator wrote; nullptr: the default
};

// Columns of jobs added after the first release: a store from before the schema version gains
// them, its rows taking the default or what `fill` computes.
constexpr AddedColumn kAddedJobColumns[] = {
    {"restart_json", "TEXT NOT NULL DEFAULT '{}'", nullptr},
    // What the store holds now is all that can be known of an older store.
    {"step_event_count", "INTEGER NOT NULL DEFAULT 0",
     "UPDATE jobs SET step_event_count = "
     "(SELECT COUNT(*) FROM step_events e WHERE e.job_id = jobs.job_id)"},
    {"load_json", "TEXT NOT NULL DEFAULT '{}'", nullptr},
};

absl::StatusOr<std::set<std::string>> Names(SqliteDb& db, const std::string& sql, int column) {
  Statement s(db, sql);
  std::set<std::string> names;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return names;
    names.insert(s.Text(column));
  }
}

absl::StatusOr<int64_t> UserVersion(SqliteDb& db) {
  Statement s(db, "PRAGMA user_version");
  RT_ASSIGN_OR_RETURN(bool row, s.Step());
  return row ? s.Int(0) : 0;
}

absl::Status SetUserVersion(SqliteDb& db) {
  return db.Exec(absl::StrCat("PRAGMA user_version = ", kStoreSchemaVersion));
}

absl::StatusOr<bool> HasJobCounter(SqliteDb& db) {
  Statement s(db, "SELECT 1 FROM counters WHERE name = 'next_job_number'");
  return s.Step();
}

std::string Lacks(const std::vector<std::string>& what, const char* kind) {
  return absl::StrCat("it lacks the ", kind, what.size() == 1 ? " " : "s ",
                      absl::StrJoin(what, ", "));
}

}  // namespace

absl::StatusOr<std::string> PrepareSchema(SqliteDb& db) {
  // One transaction: a crash never leaves a half-made schema that the next start would refuse.
  Transaction tx(db);
  RT_RETURN_IF_ERROR(tx.status());
  RT_ASSIGN_OR_RETURN(const int64_t version, UserVersion(db));
  RT_ASSIGN_OR_RETURN(const std::set<std::string> tables,
                      Names(db, "SELECT name FROM sqlite_master WHERE type = 'table'", 0));
  std::vector<std::string> lost;
  std::vector<const Table*> absent;
  for (const Table& table : kTables) {
    if (tables.count(table.name) != 0) continue;
    absent.push_back(&table);
    if (version >= kStoreSchemaVersion || !table.added_later) {
      lost.push_back(absl::StrCat(table.name, " (", table.holds, ")"));
    }
  }
  const bool is_new = version == 0 && absent.size() == std::size(kTables);
  if (!is_new && !lost.empty()) return Lacks(lost, "table");
  if (!is_new) {
    RT_ASSIGN_OR_RETURN(bool counter, HasJobCounter(db));
    if (!counter) {
      return std::string(
          "it lacks its job counter (the row next_job_number of the table counters)");
    }
  }
  for (const Table* table : absent) RT_RETURN_IF_ERROR(db.Exec(table->create));
  RT_RETURN_IF_ERROR(db.Exec(kIndexes));

  RT_ASSIGN_OR_RETURN(const std::set<std::string> columns, Names(db, "PRAGMA table_info(jobs)", 1));
  lost.clear();
  for (const AddedColumn& column : kAddedJobColumns) {
    if (columns.count(column.name) != 0) continue;
    if (version >= kStoreSchemaVersion) {
      lost.push_back(absl::StrCat("jobs.", column.name));
      continue;
    }
    RT_RETURN_IF_ERROR(
        db.Exec(absl::StrCat("ALTER TABLE jobs ADD COLUMN ", column.name, " ", column.definition)));
    if (column.fill != nullptr) RT_RETURN_IF_ERROR(db.Exec(column.fill));
  }
  if (!lost.empty()) return Lacks(lost, "column");
  if (version < kStoreSchemaVersion) RT_RETURN_IF_ERROR(SetUserVersion(db));
  RT_RETURN_IF_ERROR(tx.Commit());
  return std::string();
}

}  // namespace ringtrain
