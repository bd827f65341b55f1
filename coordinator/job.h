// What a job is, apart from where it is kept: its state machine (JobState and the transitions it
// allows) and the plain records the coordinator passes around — the job itself, its rank
// placement, why it failed, one step report, one state change. The scheduler, the cluster state,
// the job store and the protobuf mapping all speak these types; none of them needs SQLite, gRPC or
// LibTorch to do so (the job store maps them to SQL, proto_convert.h to the wire).
#ifndef RINGTRAIN_COORDINATOR_JOB_H_
#define RINGTRAIN_COORDINATOR_JOB_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ringtrain {

// QUEUED → ASSIGNED → RUNNING → SUCCEEDED | FAILED | CANCELLED; RESTARTING when a run fails and the
// restart policy starts the job again from its latest checkpoint (RESTARTING → ASSIGNED → RUNNING).
// SUCCEEDED, FAILED and CANCELLED are final.
enum class JobState {
  kQueued,
  kAssigned,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled,
  kRestarting,
};

const char* JobStateName(JobState state);                           // "QUEUED", "ASSIGNED", …
std::optional<JobState> JobStateFromName(const std::string& name);  // JobStateName's inverse
bool IsTerminal(JobState state);
// The state machine above: QUEUED → ASSIGNED | CANCELLED | FAILED; ASSIGNED → RUNNING | FAILED |
// CANCELLED | QUEUED | RESTARTING; RUNNING → SUCCEEDED | FAILED | CANCELLED | RESTARTING;
// RESTARTING → ASSIGNED | FAILED | CANCELLED; nothing leaves a final state.
bool IsAllowedTransition(JobState from, JobState to);

// "job-000042": the id of the store's 42nd job (numbered from 1, never reused).
std::string JobIdForNumber(int64_t number);

// The mesh a run of a job takes: `world` = dp × cp ranks, CP innermost (rank = dp_index × cp +
// cp_rank). A value built from the MeshDegrees that ResolveMesh (common/config/mesh.h) resolves —
// at admission (admission.h) and for an elastic restart (elastic_mesh.h) — and never resolved
// again from the config here.
struct RunMesh {
  int world = 0;
  int dp = 0;
  int cp = 0;
  // Ulysses groups (context_parallel_method ulysses/hybrid): consecutive cp ranks the placement
  // keeps on one host when a CP group has to be spread (1: ring attention).
  int ulysses = 1;
};

// Where one rank runs. cp_group = dp_index (the cp ranks of one data-parallel replica).
struct RankPlacement {
  int rank = 0;
  std::string worker_id;
  int cp_group = 0;
  int dp_index = 0;
};

// What a failure was, for JobError::cause (and the metrics' cause label).
inline constexpr char kCauseRankExit[] = "rank_exit";           // a rank ended with an error
inline constexpr char kCauseRankRefused[] = "rank_refused";     // its agent refused to start it
inline constexpr char kCauseRankHung[] = "rank_hung";           // its agent judged it hung
inline constexpr char kCauseWorkerLost[] = "worker_lost";       // its worker stopped answering
inline constexpr char kCauseAdoptTimeout[] = "adopt_timeout";   // not back after a restart
inline constexpr char kCauseUnschedulable[] = "unschedulable";  // the pool cannot hold it
inline constexpr char kCauseNoPort[] = "no_port";               // no rendezvous port was free
inline constexpr char kCauseStepsMissing[] = "steps_missing";   // records that never arrived

// Why a run of a job failed: the rank that caused it (not the survivors that noticed), with the
// tail of its stderr.
struct JobError {
  int rank = -1;  // -1: not a rank's fault (e.g. no worker fits)
  std::string worker_id;
  int exit_status = 0;
  std::string stderr_tail;
  std::string message;
  std::string cause;    // one of kCause*
  int64_t step = 0;     // the job's last reported step when it happened
  int64_t unix_ms = 0;  // when
  // How the job went on: kRecoveryHealed (in place from the in-memory snapshots: the rank on
  // replacement_worker_id, the others kept their processes) or kRecoveryRestarted (every rank
  // again, from storage); empty when it did not (the job failed) or is still deciding.
  std::string recovery;
  std::string replacement_worker_id;
  // Healed: from the failure to the first step record of the healed world (0 until it comes).
  double recovery_seconds = 0;
};

inline constexpr char kRecoveryHealed[] = "healed";
inline constexpr char kRecoveryRestarted[] = "restarted";

// A job's restart settings, from its config's [job] section (see common/config/job_config.h); what
// they lead to is coordinator/restart_policy.h.
struct RestartSettings {
  int max_restarts = 0;
  int64_t backoff_ms = 5000;
  bool elastic = false;
};

// The checkpoint a job starts from when it was submitted with --init-from / --resume-from: another
// job's step folder, <checkpoint-root>/<job_id>/<folder>/step-<step> on the workers.
struct CheckpointLoad {
  std::string job_id;
  std::string folder;  // the source job's checkpoint.folder
  int64_t step = 0;
  bool model_only = true;  // true: the weights alone (init); false: the whole state (resume)
};

// One checkpoint save of a job, as its step records announced it (the checkpoints table).
struct SavedCheckpoint {
  int64_t step = 0;
  bool complete = false;        // its commit was reported (COMPLETE written)
  std::string checkpoint_root;  // the --checkpoint-root of the worker that reported it, or ""
};

struct JobRecord {
  std::string job_id;  // "job-000001"; assigned by JobStore::CreateJob
  std::string name;
  JobState state = JobState::kQueued;
  std::string config_toml;
  std::vector<std::string> overrides;  // "key=value", applied on top of config_toml
  RunMesh degrees;                  // the current run's; the one asked for until an elastic restart
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
  RestartSettings restart;
  int restart_count = 0;  // restarts so far; also the attempt number of the current run
  // Every failure of every run, oldest first; `error` is the last when the job FAILED.
  std::vector<JobError> failures;
  // Set by an elastic restart onto a smaller mesh, applied after `overrides` (`degrees` is then
  // the smaller mesh); empty while the job runs on the mesh it asked for.
  std::vector<std::string> mesh_overrides;
  // What admission accepted but changed or ignores (v1::Job.warnings): on SubmitJob's reply only,
  // never stored.
  std::vector<std::string> warnings;
  // Set at submit for --init-from / --resume-from; never changes.
  std::optional<CheckpointLoad> load_from;
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
  // The straggler the trainer named after this step (record's straggler_rank / straggler_ratio;
  // -1 and 0 when none). Not stored apart from record_json.
  int64_t straggler_rank = -1;
  double straggler_ratio = 0;
  // The record's snapshot_step (the newest step the job can heal from), its buddy offset and the
  // world generation that wrote it. Not stored apart from record_json.
  int64_t snapshot_step = 0;
  int64_t snapshot_buddy_offset = 0;
  int64_t generation = 0;
  // The record's checkpoint_save_step / checkpoint_commit_step (0: none). Not stored apart from
  // record_json, but noted in the checkpoints table (JobStore::NoteCheckpoint).
  int64_t checkpoint_save_step = 0;
  int64_t checkpoint_commit_step = 0;
};

struct StateChange {
  std::string job_id;
  JobState from = JobState::kQueued;  // the initial change has from == to == QUEUED
  JobState to = JobState::kQueued;
  std::string message;
  int64_t unix_ms = 0;
  // Its place in the store's history, increasing (set by the store): a restarted job enters
  // ASSIGNED and RUNNING more than once, so a watcher tells changes apart by this, not by state.
  int64_t seq = 0;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_JOB_H_
