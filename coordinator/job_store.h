// The coordinator's durable job store: jobs, their state history and their step events (and the
// registered workers' credential digests), in one SQLite file. A coordinator that restarts reopens
// the file and finds every job, its history and the job counter again; agents then replay buffered
// step reports, which the store takes idempotently (keyed by job and step). The records are job.h's
// plain structs (the service maps them to protobuf); the SQL goes through sqlite_db.h. No gRPC, no
// LibTorch. One file per part: job_store.cc (opening), job_store_jobs.cc (jobs, state changes),
// job_store_steps.cc (step events), job_store_checkpoints.cc (the
// checkpoints the step records announced), job_store_workers.cc (workers), job_store_rows.h (a
// job's row).
#ifndef RINGTRAIN_COORDINATOR_JOB_STORE_H_
#define RINGTRAIN_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/clock.h"
#include "coordinator/job.h"
#include "coordinator/store_stamp.h"

namespace ringtrain {

class SqliteDb;

struct JobStoreOptions {
  // --new-store: start even when the stamp beside the file (store_stamp.h) says the store held
  // more jobs than it holds (the file is missing, emptied or older), or the stamp cannot be read:
  // a missing file is created empty, any other taken as it is, the stamp rewritten and a warning
  // logged. Never overrides a damaged file, nor one that lost tables or records.
  bool new_store = false;
};

// Thread-safe: every method may be called from any thread. One SQLite connection serves all calls
// under one mutex, so calls run one at a time (each is a short transaction). Errors: NOT_FOUND for
// an unknown job id, FAILED_PRECONDITION for a transition the state machine forbids, UNAVAILABLE
// when the database file stays locked by another process, INTERNAL for other SQLite failures.
class JobStore {
 public:
  // Opens (creating when absent) the database at `path`; ":memory:" gives a private in-memory
  // store. The directory must exist. A new file gets the schema, a store written by an older
  // coordinator the tables and columns it lacks (job_store_schema.h). WAL journal, every commit
  // synced (synchronous FULL), foreign keys on, 5 s busy timeout. Submission and state-change
  // times are read from `clock`, which must outlive the store.
  // Before it is trusted a file is checked, DATA_LOSS naming the file, what is wrong and what to
  // do (never overridden by options.new_store): PRAGMA quick_check (damaged, or not a database); a
  // table or the job counter missing; a job between 1 and the counter missing; a job holding
  // fewer step events than it took (job_store_check.h). Then its stamp `<path>.stamp`
  // (store_stamp.h): FAILED_PRECONDITION when the store holds fewer jobs than the stamp recorded
  // or the stamp cannot be read, unless options.new_store. CreateJob keeps the stamp current.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path,
                                                        Clock* clock = Clock::Real(),
                                                        const JobStoreOptions& options = {});
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Stores a new job: assigns the next job id, sets state QUEUED and the submission time, clears
  // the times and progress, and records the initial state change. Returns the stored record.
  absl::StatusOr<JobRecord> CreateJob(JobRecord job);
  absl::StatusOr<JobRecord> GetJob(const std::string& job_id);
  absl::StatusOr<std::vector<JobRecord>> ListJobs();  // submission order
  // One page for ListJobs: at most `limit` jobs, newest first, submitted before the job
  // `before_job_id` ("" = from the newest). NOT_FOUND when before_job_id names no job.
  absl::StatusOr<std::vector<JobRecord>> ListJobsNewestFirst(const std::string& before_job_id,
                                                             int64_t limit);

  // Replaces the mutable fields: name, config_toml, overrides, world_size, dp, cp, mesh,
  // wait_reason, error, total_steps, device_kind, and the restart fields (policy, restart_count,
  // failures, mesh_overrides). State and times change only through
  // TransitionJob, progress only through AppendStepEvent, so a stale copy written back cannot
  // undo either.
  absl::Status UpdateJob(const JobRecord& job);

  // Moves a job to `to` if the state machine allows it (see IsAllowedTransition) and records the
  // change. Entering RUNNING the first time sets started_unix_ms; entering a final state sets
  // finished_unix_ms.
  absl::StatusOr<StateChange> TransitionJob(const std::string& job_id, JobState to,
                                            const std::string& message);

  // Stores one step event. Idempotent: a (job, step) already stored is left as it was and the call
  // returns false; a new one returns true and raises the job's last_step/last_loss if the step is
  // the highest so far (replayed reports may arrive out of order).
  absl::StatusOr<bool> AppendStepEvent(const StepEvent& event);
  // Step events with step >= from_step, ordered by step, at most `limit` (limit <= 0: all).
  absl::StatusOr<std::vector<StepEvent>> StepEvents(const std::string& job_id, int64_t from_step,
                                                    int64_t limit);
  // The steps the job has events for, ascending (what MissingSteps in step_ranges.h reads).
  absl::StatusOr<std::vector<int64_t>> StoredSteps(const std::string& job_id);
  // The job's state changes, oldest first.
  absl::StatusOr<std::vector<StateChange>> StateChanges(const std::string& job_id);

  // A checkpoint save the job's step records announced (job_store_checkpoints.cc): `complete`
  // false for a save that began, true for one that committed. Idempotent; a step once complete
  // stays complete, and keeps the first checkpoint_root noted. NOT_FOUND for an unknown job.
  absl::Status NoteCheckpoint(const std::string& job_id, int64_t step, bool complete,
                              const std::string& checkpoint_root);
  // Every save noted for the job, by step ascending (before keep_latest_k: checkpoint_list.h).
  absl::StatusOr<std::vector<SavedCheckpoint>> Checkpoints(const std::string& job_id);

  // The number the next CreateJob will use (1 for a new store); persists across reopen.
  absl::StatusOr<int64_t> NextJobNumber();

  // Registered workers' credentials, as digests (worker_credential.h), never the secret itself:
  // what lets an agent that registers again after a restart prove it is the worker it names
  // (job_store_workers.cc). Put replaces the digest of a known id.
  absl::Status PutWorkerCredential(const std::string& worker_id, const std::string& digest);
  // The stored digest, or "" when the id is unknown (never registered, or purged).
  absl::StatusOr<std::string> WorkerCredential(const std::string& worker_id);
  absl::Status DeleteWorker(const std::string& worker_id);  // OK when already absent
  absl::StatusOr<std::vector<std::string>> WorkerIds();

 private:
  JobStore(std::unique_ptr<SqliteDb> db, std::string path, Clock* clock, StoreStampKeeper stamp);

  absl::StatusOr<JobRecord> GetJobLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> NextJobNumberLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NowUnixMs() { return absl::ToUnixMillis(clock_->Now()); }

  absl::Mutex mu_;
  const std::unique_ptr<SqliteDb> db_ ABSL_PT_GUARDED_BY(mu_);
  const std::string path_;
  Clock* const clock_;
  StoreStampKeeper stamp_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_JOB_STORE_H_
