// The step events of the jobs: appended idempotently (keyed by job and step) as agents report and
// replay them, read back in step order.
#include <vector>

#include "common/status_macros.h"
#include "coordinator/job_store.h"
#include "coordinator/job_store_rows.h"
#include "coordinator/sqlite_db.h"

namespace ringtrain {

absl::StatusOr<bool> JobStore::AppendStepEvent(const StepEvent& e) {
  absl::MutexLock lock(&mu_);
  Transaction tx(*db_);
  RT_RETURN_IF_ERROR(tx.status());
  {
    Statement exists(*db_, "SELECT 1 FROM jobs WHERE job_id = ?");
    exists.Bind(1, e.job_id);
    RT_ASSIGN_OR_RETURN(bool row, exists.Step());
    if (!row) return JobNotFound(e.job_id);
  }
  Statement insert(*db_,
                   "INSERT OR IGNORE INTO step_events (job_id, step, loss, grad_norm, lr, "
                   "tokens_per_second, step_seconds, record_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  insert.Bind(1, e.job_id).Bind(2, e.step).Bind(3, e.loss).Bind(4, e.grad_norm).Bind(5, e.lr);
  insert.Bind(6, e.tokens_per_second).Bind(7, e.step_seconds).Bind(8, e.record_json);
  RT_RETURN_IF_ERROR(insert.Run());
  bool is_new = db_->Changes() > 0;
  if (is_new) {
    // The count lets Open tell a step event lost later from one that never arrived.
    Statement count(*db_,
                    "UPDATE jobs SET step_event_count = step_event_count + 1 WHERE job_id = ?");
    count.Bind(1, e.job_id);
    RT_RETURN_IF_ERROR(count.Run());
    Statement progress(
        *db_, "UPDATE jobs SET last_step = ?, last_loss = ? WHERE job_id = ? AND last_step <= ?");
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
  Statement s(*db_,
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

absl::StatusOr<std::vector<int64_t>> JobStore::StoredSteps(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  RT_RETURN_IF_ERROR(GetJobLocked(job_id).status());
  Statement s(*db_, "SELECT step FROM step_events WHERE job_id = ? ORDER BY step");
  s.Bind(1, job_id);
  std::vector<int64_t> steps;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    steps.push_back(s.Int(0));
  }
  return steps;
}

}  // namespace ringtrain
