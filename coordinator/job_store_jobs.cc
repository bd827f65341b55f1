// The jobs and their state history: each operation one short transaction under the store's mutex.
// How a job is a row is in job_store_rows.cc.
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/job_store.h"
#include "coordinator/job_store_rows.h"
#include "coordinator/sqlite_db.h"

namespace ringtrain {
namespace {

// Inserts `c` and sets its seq (the row's, increasing over the whole store).
absl::Status InsertStateChange(SqliteDb& db, StateChange& c) {
  Statement s(db,
              "INSERT INTO state_changes (job_id, from_state, to_state, message, unix_ms) "
              "VALUES (?, ?, ?, ?, ?)");
  s.Bind(1, c.job_id)
      .Bind(2, std::string(JobStateName(c.from)))
      .Bind(3, std::string(JobStateName(c.to)));
  s.Bind(4, c.message).Bind(5, c.unix_ms);
  RT_RETURN_IF_ERROR(s.Run());
  c.seq = db.LastInsertRowId();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobRecord> JobStore::CreateJob(JobRecord job) {
  absl::MutexLock lock(&mu_);
  Transaction tx(*db_);
  RT_RETURN_IF_ERROR(tx.status());
  RT_ASSIGN_OR_RETURN(int64_t number, NextJobNumberLocked());
  job.job_id = JobIdForNumber(number);
  job.state = JobState::kQueued;
  job.submitted_unix_ms = NowUnixMs();
  job.started_unix_ms = job.finished_unix_ms = 0;
  job.last_step = 0;
  job.last_loss = 0;

  Statement insert(*db_,
                   absl::StrCat("INSERT INTO jobs (job_number, ", kJobColumns, ") VALUES ",
                                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  insert.Bind(1, number)
      .Bind(2, job.job_id)
      .Bind(3, job.name)
      .Bind(4, std::string(JobStateName(job.state)));
  insert.Bind(5, job.config_toml).Bind(6, OverridesJson(job.overrides)).Bind(7, job.degrees.world);
  insert.Bind(8, job.degrees.dp)
      .Bind(9, job.degrees.cp)
      .Bind(10, MeshJson(job.mesh))
      .Bind(11, job.wait_reason);
  insert.Bind(12, ErrorJson(job.error))
      .Bind(13, job.submitted_unix_ms)
      .Bind(14, job.started_unix_ms)
      .Bind(15, job.finished_unix_ms);
  insert.Bind(16, job.total_steps).Bind(17, job.last_step).Bind(18, job.last_loss);
  insert.Bind(19, job.device_kind).Bind(20, RestartJson(job)).Bind(21, LoadJson(job.load_from));
  RT_RETURN_IF_ERROR(insert.Run());

  Statement bump(*db_, "UPDATE counters SET value = ? WHERE name = 'next_job_number'");
  bump.Bind(1, number + 1);
  RT_RETURN_IF_ERROR(bump.Run());
  StateChange submitted{job.job_id, JobState::kQueued, JobState::kQueued, "submitted",
                        job.submitted_unix_ms};
  RT_RETURN_IF_ERROR(InsertStateChange(*db_, submitted));
  RT_RETURN_IF_ERROR(tx.Commit());
  stamp_.Record(number + 1, job.submitted_unix_ms);  // after the commit: may lag, never lead
  return job;
}

absl::StatusOr<JobRecord> JobStore::GetJobLocked(const std::string& job_id) {
  Statement s(*db_, absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE job_id = ?"));
  s.Bind(1, job_id);
  RT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return JobNotFound(job_id);
  return ReadJob(s);
}

absl::StatusOr<JobRecord> JobStore::GetJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return GetJobLocked(job_id);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListJobs() {
  absl::MutexLock lock(&mu_);
  Statement s(*db_, absl::StrCat("SELECT ", kJobColumns, " FROM jobs ORDER BY job_number"));
  return ReadJobs(s);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListJobsNewestFirst(
    const std::string& before_job_id, int64_t limit) {
  absl::MutexLock lock(&mu_);
  int64_t before = std::numeric_limits<int64_t>::max();
  if (!before_job_id.empty()) {
    Statement find(*db_, "SELECT job_number FROM jobs WHERE job_id = ?");
    find.Bind(1, before_job_id);
    RT_ASSIGN_OR_RETURN(bool found, find.Step());
    if (!found) return JobNotFound(before_job_id);
    before = find.Int(0);
  }
  Statement s(*db_,
              absl::StrCat("SELECT ", kJobColumns,
                           " FROM jobs WHERE job_number < ? ORDER BY job_number DESC LIMIT ?"));
  s.Bind(1, before).Bind(2, limit);
  return ReadJobs(s);
}

absl::Status JobStore::UpdateJob(const JobRecord& job) {
  absl::MutexLock lock(&mu_);
  Statement s(
      *db_,
      "UPDATE jobs SET name = ?, config_toml = ?, overrides_json = ?, world_size = ?, dp = ?, "
      "cp = ?, mesh_json = ?, wait_reason = ?, error_json = ?, total_steps = ?, device_kind = ?, "
      "restart_json = ? WHERE job_id = ?");
  s.Bind(1, job.name).Bind(2, job.config_toml).Bind(3, OverridesJson(job.overrides));
  s.Bind(4, job.degrees.world)
      .Bind(5, job.degrees.dp)
      .Bind(6, job.degrees.cp)
      .Bind(7, MeshJson(job.mesh));
  s.Bind(8, job.wait_reason).Bind(9, ErrorJson(job.error));
  s.Bind(10, job.total_steps).Bind(11, job.device_kind).Bind(12, RestartJson(job));
  s.Bind(13, job.job_id);
  RT_RETURN_IF_ERROR(s.Run());
  if (db_->Changes() == 0) return JobNotFound(job.job_id);
  return absl::OkStatus();
}

absl::StatusOr<StateChange> JobStore::TransitionJob(const std::string& job_id, JobState to,
                                                    const std::string& message) {
  absl::MutexLock lock(&mu_);
  Transaction tx(*db_);
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
  Statement s(*db_,
              "UPDATE jobs SET state = ?, started_unix_ms = ?, finished_unix_ms = ? "
              "WHERE job_id = ?");
  s.Bind(1, std::string(JobStateName(to)))
      .Bind(2, job.started_unix_ms)
      .Bind(3, job.finished_unix_ms);
  s.Bind(4, job_id);
  RT_RETURN_IF_ERROR(s.Run());
  RT_RETURN_IF_ERROR(InsertStateChange(*db_, change));
  RT_RETURN_IF_ERROR(tx.Commit());
  return change;
}

absl::StatusOr<std::vector<StateChange>> JobStore::StateChanges(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  RT_RETURN_IF_ERROR(GetJobLocked(job_id).status());
  Statement s(*db_,
              "SELECT from_state, to_state, message, unix_ms, seq FROM state_changes "
              "WHERE job_id = ? ORDER BY seq");
  s.Bind(1, job_id);
  std::vector<StateChange> changes;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    RT_ASSIGN_OR_RETURN(JobState from, ParseJobState(s.Text(0)));
    RT_ASSIGN_OR_RETURN(JobState to, ParseJobState(s.Text(1)));
    changes.push_back({job_id, from, to, s.Text(2), s.Int(3), s.Int(4)});
  }
  return changes;
}

}  // namespace ringtrain
