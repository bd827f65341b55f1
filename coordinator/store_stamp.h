// The job store's stamp: a small JSON file beside the SQLite database, `<db>.stamp`, that records
// how many jobs the store has held (its next job number) and when. SQLite cannot tell a store that
// went missing, was emptied or was swapped for an older copy from a first start; without the stamp
// the coordinator would begin again at job-000001, hand out job ids a second time and lose the
// history. With it, such a start is refused until the store is restored or --new-store says to
// take it as it is.
//
// Order of writes: the stamp is written after the SQLite commit that created the jobs (the store
// syncs every commit), as a new file renamed over the old one, so it may lag the store (a crash
// between the two) but never run ahead of it; a lagging stamp is accepted and brought up to date.
// In-memory stores (":memory:", "file:" URIs) have no stamp. No SQLite here: JobStore reads its
// own next job number and hands it in.
#ifndef RINGTRAIN_COORDINATOR_STORE_STAMP_H_
#define RINGTRAIN_COORDINATOR_STORE_STAMP_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

struct StoreStamp {
  int64_t next_job_number = 1;  // the store's NextJobNumber when written: it held this - 1 jobs
  int64_t written_unix_ms = 0;
};

// Whether a store at `db_path` keeps a stamp: false for ":memory:" and "file:" URIs.
bool HasStoreStamp(const std::string& db_path);
std::string StoreStampPath(const std::string& db_path);  // db_path + ".stamp"

// The stamp as its file holds it: one JSON object (next_job_number, the last job id and the time,
// both as figures and readable, for a person looking at the file), newline-terminated.
std::string FormatStoreStamp(const StoreStamp& stamp);
// The inverse of FormatStoreStamp; only next_job_number (an integer >= 1) and written_unix_ms (an
// integer) are read, other keys are ignored. INVALID_ARGUMENT saying what is wrong (not naming the
// file: the caller does).
absl::StatusOr<StoreStamp> ParseStoreStamp(absl::string_view text);

// The stamp at `stamp_path`, or nullopt when there is no such file. FAILED_PRECONDITION naming the
// file when it cannot be read or parsed.
absl::StatusOr<std::optional<StoreStamp>> ReadStoreStamp(const std::string& stamp_path);
// Replaces the stamp atomically: writes `<stamp_path>.tmp.<pid>.<n>` in the same folder, fsyncs
// it, renames it over `stamp_path` and fsyncs the folder. A reader sees the old stamp or the new
// one, never a part. INTERNAL naming the file and the system's reason on failure.
absl::Status WriteStoreStamp(const std::string& stamp_path, const StoreStamp& stamp);

// Why the store at `db_path` does not match `stamp` (read from `stamp_path`), or "" when it does.
// `next_job_number` is the store's NextJobNumber, or nullopt when its file does not exist. The
// store matches when it has held at least as many jobs as the stamp says (a stamp may lag). The
// text names both files, the jobs the stamp recorded, its last job id and time; no remedy.
std::string StoreStampMismatch(const std::string& db_path, const std::string& stamp_path,
                               const StoreStamp& stamp, std::optional<int64_t> next_job_number);

// The stamp of one open job store, from its opening to its end (JobStore holds one). Not
// thread-safe: the store calls it under its own mutex.
class StoreStampKeeper {
 public:
  // Before the database at `db_path` is opened (and maybe created): reads its stamp. Refuses
  // (FAILED_PRECONDITION naming both files, what the stamp recorded and the fix) a database file
  // that is missing although the stamp says it held jobs, and a stamp that cannot be read, unless
  // `new_store` (--new-store) takes the store as it is: then a warning is logged. A path without a
  // stamp (HasStoreStamp) gets a keeper that does nothing.
  static absl::StatusOr<StoreStampKeeper> BeforeOpen(const std::string& db_path, bool new_store);

  // Once the store is open with its schema, `next_job_number` its NextJobNumber: refuses a store
  // that holds no jobs or fewer than the stamp says (FAILED_PRECONDITION, as above), unless
  // `new_store` (a warning saying what was accepted); then brings the stamp up to date. A stamp
  // that cannot be written is INTERNAL naming it.
  absl::Status AfterOpen(int64_t next_job_number, int64_t now_unix_ms);

  // After a commit that created a job: records `next_job_number`. A failed write is logged, not
  // returned: the job is stored, and a stamp that lags is accepted at the next start.
  void Record(int64_t next_job_number, int64_t now_unix_ms);

 private:
  StoreStampKeeper() = default;

  std::string db_path_;
  std::string stamp_path_;  // "": this store keeps no stamp
  bool new_store_ = false;
  std::optional<StoreStamp> found_;  // the stamp BeforeOpen read; nullopt when absent or invalid
  std::string invalid_;  // why the stamp could not be read ("" when it could, or was absent)
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_STORE_STAMP_H_
