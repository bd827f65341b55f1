// A small RAII layer over the SQLite C API, so that the job store reads as SQL and rules rather
// than as return-code plumbing: one connection (SqliteDb), one prepared statement with bound
// values (Statement), one BEGIN IMMEDIATE … COMMIT (Transaction). Every failure comes back as an
// absl::Status naming the statement that failed, with SQLite's message and result code:
// UNAVAILABLE when the database stayed busy or locked (retry later), DATA_LOSS when the file is
// damaged or not a database (SQLITE_CORRUPT, SQLITE_NOTADB: restore it), INTERNAL otherwise.
// Values are always bound, never spliced into SQL text. sqlite3.h stays out of this header.
#ifndef RINGTRAIN_COORDINATOR_SQLITE_DB_H_
#define RINGTRAIN_COORDINATOR_SQLITE_DB_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct sqlite3;
struct sqlite3_stmt;

namespace ringtrain {

// One connection. Not thread-safe (opened without SQLite's own mutex): the owner serialises every
// use of the connection and of its Statements and Transactions. Closed on destruction; every
// Statement and Transaction on it must be gone by then.
class SqliteDb {
 public:
  // Opens `path` read-write, creating the file when absent; ":memory:" and "file:" URIs work too.
  // Extended result codes on; a locked database is retried for up to `busy_timeout`.
  // FAILED_PRECONDITION (SQLite's reason; the caller names the file) when it cannot be opened,
  // DATA_LOSS when SQLite finds it damaged (most damage shows only at the first statement).
  static absl::StatusOr<std::unique_ptr<SqliteDb>> Open(const std::string& path,
                                                        absl::Duration busy_timeout);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // Runs `sql` — one or more statements that bind nothing and whose rows are not wanted
  // (pragmas, the schema).
  absl::Status Exec(const std::string& sql);

  // PRAGMA quick_check: OK when SQLite finds the file sound; otherwise DATA_LOSS listing the first
  // `max_problems` problems it reports on one line (or the statement's own error, DATA_LOSS for a
  // file that is not a database). Reads every page, so it takes time in proportion to the file.
  absl::Status QuickCheck(int max_problems = 3);

  // Rows inserted, updated or deleted by the last such statement that finished.
  int64_t Changes() const;
  // The rowid of the last row this connection inserted.
  int64_t LastInsertRowId() const;

 private:
  friend class Statement;
  friend class Transaction;
  explicit SqliteDb(sqlite3* db) : db_(db) {}

  sqlite3* const db_;
};

// One prepared statement. A failure to prepare or to bind is kept and returned by the next Step
// or Run (so binds chain without checks in between); the statement is finalised on destruction.
class Statement {
 public:
  Statement(SqliteDb& db, const std::string& sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters count from 1. SQLite has no NaN: a NaN double is bound as NULL, and Double()
  // reads NULL back as NaN. A nullopt string is bound as NULL.
  Statement& Bind(int i, int64_t v);
  Statement& Bind(int i, int v) { return Bind(i, static_cast<int64_t>(v)); }
  Statement& Bind(int i, double v);
  Statement& Bind(int i, const std::string& v);
  Statement& Bind(int i, const std::optional<std::string>& v);
  Statement& BindNull(int i);

  // Advances to the next row: true when a row is ready, false when the statement is done.
  absl::StatusOr<bool> Step();
  // Steps once, for statements that return no rows (INSERT, UPDATE, DELETE).
  absl::Status Run();

  // Columns of the current row, counting from 0.
  int64_t Int(int col) const;
  double Double(int col) const;
  bool IsNull(int col) const;
  std::string Text(int col) const;  // "" for NULL

 private:
  Statement& Check(int rc, int param);

  sqlite3* const db_;
  const std::string sql_;
  sqlite3_stmt* stmt_ = nullptr;
  absl::Status status_;  // the first prepare or bind failure
};

// BEGIN IMMEDIATE on construction (the write lock is taken up front, so two writers never deadlock
// upgrading); ROLLBACK on destruction unless Commit succeeded.
class Transaction {
 public:
  explicit Transaction(SqliteDb& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  absl::Status status() const { return status_; }  // whether BEGIN succeeded
  absl::Status Commit();

 private:
  sqlite3* const db_;
  absl::Status status_;
  bool done_ = false;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_SQLITE_DB_H_
