// The workers table of the JobStore: one row per registered worker id, holding the digest of its
// current session credential. Rows are written at Register and deleted when the Cluster purges a
// lost worker, so the table stays as small as the pool.
#include <utility>

#include "common/status_macros.h"
#include "coordinator/job_store.h"
#include "coordinator/sqlite_db.h"

namespace ringtrain {

absl::Status JobStore::PutWorkerCredential(const std::string& worker_id,
                                           const std::string& digest) {
  absl::MutexLock lock(&mu_);
  Statement s(*db_,
              "INSERT INTO workers (worker_id, credential_sha256, registered_unix_ms) "
              "VALUES (?, ?, ?) ON CONFLICT (worker_id) DO UPDATE SET "
              "credential_sha256 = excluded.credential_sha256, "
              "registered_unix_ms = excluded.registered_unix_ms");
  s.Bind(1, worker_id).Bind(2, digest).Bind(3, NowUnixMs());
  return s.Run();
}

absl::StatusOr<std::string> JobStore::WorkerCredential(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  Statement s(*db_, "SELECT credential_sha256 FROM workers WHERE worker_id = ?");
  s.Bind(1, worker_id);
  RT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::string();
  return s.Text(0);
}

absl::Status JobStore::DeleteWorker(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  Statement s(*db_, "DELETE FROM workers WHERE worker_id = ?");
  s.Bind(1, worker_id);
  return s.Run();
}

absl::StatusOr<std::vector<std::string>> JobStore::WorkerIds() {
  absl::MutexLock lock(&mu_);
  Statement s(*db_, "SELECT worker_id FROM workers ORDER BY worker_id");
  std::vector<std::string> ids;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    ids.push_back(s.Text(0));
  }
  return ids;
}

}  // namespace ringtrain
