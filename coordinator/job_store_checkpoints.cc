// The checkpoints of the jobs, as their step records announced them: a save that began
// (checkpoint_save_step) and a save that committed (checkpoint_commit_step). Kept apart from the
// step events because the store keeps only a step's first record, while a restarted run may save
// (and commit) the same step again.
#include <vector>

#include "common/status_macros.h"
#include "coordinator/job_store.h"
#include "coordinator/job_store_rows.h"
#include "coordinator/sqlite_db.h"

namespace ringtrain {

absl::Status JobStore::NoteCheckpoint(const std::string& job_id, int64_t step, bool complete,
                                      const std::string& checkpoint_root) {
  absl::MutexLock lock(&mu_);
  RT_RETURN_IF_ERROR(GetJobLocked(job_id).status());
  Statement s(*db_,
              "INSERT INTO checkpoints (job_id, step, complete, checkpoint_root) "
              "VALUES (?, ?, ?, ?) ON CONFLICT (job_id, step) DO UPDATE SET "
              "complete = MAX(complete, excluded.complete)");
  s.Bind(1, job_id).Bind(2, step).Bind(3, int64_t{complete ? 1 : 0}).Bind(4, checkpoint_root);
  return s.Run();
}

absl::StatusOr<std::vector<SavedCheckpoint>> JobStore::Checkpoints(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  RT_RETURN_IF_ERROR(GetJobLocked(job_id).status());
  Statement s(*db_,
              "SELECT step, complete, checkpoint_root FROM checkpoints WHERE job_id = ? "
              "ORDER BY step");
  s.Bind(1, job_id);
  std::vector<SavedCheckpoint> saved;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return saved;
    saved.push_back({s.Int(0), s.Int(1) != 0, s.Text(2)});
  }
}

}  // namespace ringtrain
