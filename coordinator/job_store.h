// The coordinator's durable job store: jobs, their state history and their step events, in one
// SQLite file. A coordinator that restarts reopens the file and finds every job, its history and
// the job counter again; agents then replay buffered step reports, which the store takes
// idempotently (keyed by job and step). Plain structs here: the service maps them to protobuf. No
// gRPC, no LibTorch.
#ifndef RINGTRAIN_COORDINATOR_JOB_STORE_H_
#define RINGTRAIN_COORDINATOR_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

struct sqlite3;

namespace ringtrain {

// QUEUED → ASSIGNED → RUNNING → SUCCEEDED | FAILED | CANCELLED; RESTARTING when a restart policy
// resumes a running job from its checkpoint. SUCCEEDED, FAILED and CANCELLED are final.
enum class JobState { kQueued, kAssigned, kRunning, kSucceeded, kFailed, kCancelled, kRestarting };

const char* JobStateName(JobState state);  // "QUEUED", "ASSIGNED", …
std::optional<JobState> JobStateFromName(const std::string& name);
bool IsTerminal(JobState state);
bool IsAllowedTransition(JobState from, JobState to);

struct RankPlacement {
  int rank = 0;
  std::string worker_id;
  int cp_group = 0;
  int dp_index = 0;
};

// Why a job failed: the first rank that did, with the tail of its stderr.
struct JobError {
  int rank = -1;  // -1: not a rank's fault (e.g. no worker fits)
  std::string worker_id;
  int exit_status = 0;
  std::string stderr_tail;
  std::string message;
};

struct JobRecord {
  std::string job_id;  // "job-000001"; assigned by CreateJob
  std::string name;
  JobState state = JobState::kQueued;
  std::string config_toml;
  std::vector<std::string> overrides;  // "key=value", applied on top of config_toml
  int world_size = 0;
  int dp = 0;
  int cp = 0;
  std::string device_kind = "cpu";  // the kind of worker every rank needs: "cpu" | "cuda"
  std::vector<RankPlacement> mesh;  // empty until assigned
  std::string wait_reason;          // why a QUEUED job is not placed yet
  std::optional<JobError> error;
  // Unix milliseconds; 0 = not yet.
  int64_t submitted_unix_ms = 0;
  int64_t started_unix_ms = 0;   // first entry into RUNNING
  int64_t finished_unix_ms = 0;  // entry into a final state
  int64_t total_steps = 0;
  int64_t last_step = 0;  // highest step reported so far; steps count from 1, 0 = none yet
  double last_loss = 0;
};

// One step report of one job (rank 0's figures), as the trainer wrote it.
struct StepEvent {
  std::string job_id;
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  double tokens_per_second = 0;
  double step_seconds = 0;
  std::string record_json;  // the full JSONL record, kept as is
};

struct StateChange {
  std::string job_id;
  JobState from = JobState::kQueued;  // the initial change has from == to == QUEUED
  JobState to = JobState::kQueued;
  std::string message;
  int64_t unix_ms = 0;
};

// Thread-safe: every method may be called from any thread. One SQLite connection serves all calls
// under one mutex, so calls run one at a time (each is a short transaction). Errors: NOT_FOUND for
// an unknown job id, FAILED_PRECONDITION for a transition the state machine forbids, UNAVAILABLE
// when the database file stays locked by another process, INTERNAL for other SQLite failures.
class JobStore {
 public:
  // Opens (creating when absent) the database at `path` and its schema; ":memory:" gives a private
  // in-memory store. The directory must exist. WAL journal, foreign keys on, 5 s busy timeout.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Stores a new job: assigns the next job id, sets state QUEUED and the submission time, clears
  // the times and progress, and records the initial state change. Returns the stored record.
  absl::StatusOr<JobRecord> CreateJob(JobRecord job);
  absl::StatusOr<JobRecord> GetJob(const std::string& job_id);
  absl::StatusOr<std::vector<JobRecord>> ListJobs();  // submission order

  // Replaces the mutable fields: name, config_toml, overrides, world_size, dp, cp, mesh,
  // wait_reason, error, total_steps, device_kind. State and times change only through TransitionJob, progress
  // only through AppendStepEvent, so a stale copy written back cannot undo either.
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
  // The job's state changes, oldest first.
  absl::StatusOr<std::vector<StateChange>> StateChanges(const std::string& job_id);

  // The number the next CreateJob will use (1 for a new store); persists across reopen.
  absl::StatusOr<int64_t> NextJobNumber();

 private:
  JobStore(sqlite3* db, std::string path);

  absl::StatusOr<JobRecord> GetJobLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> NextJobNumberLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  const std::string path_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_JOB_STORE_H_
