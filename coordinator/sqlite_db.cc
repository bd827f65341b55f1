#include "coordinator/sqlite_db.h"

#include <sqlite3.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace {

// The statement as an error names it: whitespace runs collapsed, cut after 100 characters (the
// schema is one long text).
std::string Describe(const std::string& sql) {
  constexpr size_t kMaxChars = 100;
  std::string out;
  for (char c : sql) {
    const bool space = absl::ascii_isspace(static_cast<unsigned char>(c));
    if (space && (out.empty() || out.back() == ' ')) continue;
    out.push_back(space ? ' ' : c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.size() > kMaxChars) out = absl::StrCat(out.substr(0, kMaxChars), "…");
  return out;
}

// Whether result code `rc` says the file is damaged or not a database at all.
bool IsDamage(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

// `what` failed with result code `rc`; `message` is SQLite's explanation.
absl::Status Error(int rc, const std::string& what, const char* message) {
  std::string text = absl::StrCat(what, ": ", message != nullptr ? message : sqlite3_errstr(rc),
                                  " (sqlite code ", rc, ")");
  const int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return absl::UnavailableError(text);
  if (IsDamage(rc)) return absl::DataLossError(text);
  return absl::InternalError(text);
}

absl::Status Error(sqlite3* db, int rc, const std::string& what) {
  return Error(rc, what, sqlite3_errmsg(db));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path,
                                                         absl::Duration busy_timeout) {
  sqlite3* db = nullptr;
  const int flags =
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI;
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string text = absl::StrCat(db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
                                          " (sqlite code ", rc, ")");
    absl::Status status =
        IsDamage(rc) ? absl::DataLossError(text) : absl::FailedPreconditionError(text);
    sqlite3_close(db);
    return status;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, static_cast<int>(absl::ToInt64Milliseconds(busy_timeout)));
  return std::unique_ptr<SqliteDb>(new SqliteDb(db));
}

SqliteDb::~SqliteDb() { sqlite3_close(db_); }

absl::Status SqliteDb::Exec(const std::string& sql) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message);
  if (rc == SQLITE_OK) return absl::OkStatus();
  absl::Status status = Error(rc, Describe(sql), message);
  sqlite3_free(message);
  return status;
}

int64_t SqliteDb::Changes() const { return sqlite3_changes(db_); }

int64_t SqliteDb::LastInsertRowId() const { return sqlite3_last_insert_rowid(db_); }

absl::Status SqliteDb::QuickCheck(int max_problems) {
  constexpr size_t kMaxProblemChars = 200;
  Statement check(*this, absl::StrCat("PRAGMA quick_check(", max_problems + 1, ")"));
  // One problem a line; SQLite may put several lines in one row, under a "*** in database" head.
  std::vector<std::string> problems;
  while (true) {
    absl::StatusOr<bool> row = check.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    const std::string text = check.Text(0);
    if (text == "ok") return absl::OkStatus();
    for (absl::string_view line :
         absl::StrSplit(text, absl::ByAnyChar("\r\n"), absl::SkipEmpty())) {
      if (absl::StartsWith(line, "*** in database")) continue;
      std::string problem(line.substr(0, kMaxProblemChars));
      if (line.size() > kMaxProblemChars) problem += "…";
      problems.push_back(std::move(problem));
    }
  }
  if (problems.empty()) problems.push_back("problems it did not describe");
  const bool more = static_cast<int>(problems.size()) > max_problems;
  if (more) problems.resize(max_problems);
  return absl::DataLossError(absl::StrCat(
      "PRAGMA quick_check found: ", absl::StrJoin(problems, "; "), more ? "; and more" : ""));
}

Statement::Statement(SqliteDb& db, const std::string& sql) : db_(db.db_), sql_(sql) {
  const int rc = sqlite3_prepare_v2(db_, sql_.c_str(), -1, &stmt_, nullptr);
  if (rc != SQLITE_OK) status_ = Error(db_, rc, absl::StrCat("prepare ", Describe(sql_)));
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::Check(int rc, int param) {
  if (status_.ok() && rc != SQLITE_OK) {
    status_ = Error(db_, rc, absl::StrCat("bind ?", param, " of ", Describe(sql_)));
  }
  return *this;
}

Statement& Statement::Bind(int i, int64_t v) {
  if (!status_.ok()) return *this;
  return Check(sqlite3_bind_int64(stmt_, i, v), i);
}

Statement& Statement::Bind(int i, double v) {
  if (!status_.ok()) return *this;
  return Check(std::isnan(v) ? sqlite3_bind_null(stmt_, i) : sqlite3_bind_double(stmt_, i, v), i);
}

Statement& Statement::Bind(int i, const std::string& v) {
  if (!status_.ok()) return *this;
  return Check(sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT),
               i);
}

Statement& Statement::Bind(int i, const std::optional<std::string>& v) {
  return v ? Bind(i, *v) : BindNull(i);
}

Statement& Statement::BindNull(int i) {
  if (!status_.ok()) return *this;
  return Check(sqlite3_bind_null(stmt_, i), i);
}

absl::StatusOr<bool> Statement::Step() {
  RT_RETURN_IF_ERROR(status_);
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return Error(db_, rc, Describe(sql_));
}

absl::Status Statement::Run() { return Step().status(); }

int64_t Statement::Int(int col) const { return sqlite3_column_int64(stmt_, col); }

double Statement::Double(int col) const {
  return IsNull(col) ? std::numeric_limits<double>::quiet_NaN() : sqlite3_column_double(stmt_, col);
}

bool Statement::IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

std::string Statement::Text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  return p == nullptr
             ? std::string()
             : std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, col));
}

Transaction::Transaction(SqliteDb& db) : db_(db.db_) {
  const int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) status_ = Error(db_, rc, "BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
  if (status_.ok() && !done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

absl::Status Transaction::Commit() {
  RT_RETURN_IF_ERROR(status_);
  const int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(db_, rc, "COMMIT");
  done_ = true;
  return absl::OkStatus();
}

}  // namespace ringtrain
