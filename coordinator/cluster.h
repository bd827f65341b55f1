// The coordinator's live state: the workers (WorkerRegistry, worker_registry.h), the job queue and
// gang scheduling (scheduler.h), each job's current run (JobRun, job_run.h), how a run fails and
// whether the job restarts (RestartPolicy, restart_policy.h), and how a job ends. Cluster owns the
// one lock and orchestrates: the decisions are made by those parts, pure or lock-free, called
// with the lock held. Every change that a client can see is written to the JobStore first and
// then published on the EventHub, under that lock, so the store's order is the order watchers
// see. No gRPC server types here: agents are reached through the AgentChannel each Session stream
// registers. cluster.cc holds the entry points, cluster_jobs.cc scheduling and the job lifecycle,
// cluster_restarts.cc failures, restarts and re-adoption after a coordinator restart,
// cluster_records.cc the step records, cluster_logs.cc reaching a worker for its logs.
//
// Failures and restarts. A run fails on its *cause*: a rank that exits with an error, a rank its
// agent reports hung, a worker lost, or (after a coordinator restart) an agent that does not come
// back. A rank that exits because it lost contact with a peer (the trainer's exit status
// kExitPeerLost) is a symptom, not a cause: the coordinator waits up to kSymptomWindow for the
// cause (the killed rank's exit, the hung report, the lost session) and names that rank and its
// worker; only if none comes is the symptom itself the cause. Then every rank of the run is
// stopped and, with restarts left ([job] max_restarts), the job goes RESTARTING: once every rank
// of the failed run has exited (or its worker is gone) and restart_backoff_seconds have passed, it
// is scheduled ahead of the queue on any idle workers (elastic: on fewer, coordinator/
// elastic_mesh.h), and its ranks resume from the job's latest checkpoint. Each run has an attempt
// number (JobRecord::restart_count) that every rank message carries, so a late message of an
// earlier run is never taken for the current one.
#ifndef RINGTRAIN_COORDINATOR_CLUSTER_H_
#define RINGTRAIN_COORDINATOR_CLUSTER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/clock.h"
#include "coordinator/elastic_mesh.h"
#include "coordinator/event_hub.h"
#include "coordinator/job.h"
#include "coordinator/job_run.h"
#include "coordinator/job_store.h"
#include "coordinator/log_router.h"
#include "coordinator/scheduler.h"
#include "coordinator/step_ranges.h"
#include "coordinator/worker_registry.h"
#include "ringtrain/v1/job_service.pb.h"
#include "ringtrain/v1/worker_service.pb.h"

namespace ringtrain {

struct ClusterOptions {
  absl::Duration worker_timeout = absl::Seconds(10);     // no heartbeat for this long: LOST
  absl::Duration heartbeat_interval = absl::Seconds(1);  // told to agents at Register
  int rendezvous_port_first = 29500;                     // ports handed to rank 0's TCPStore
  int rendezvous_port_last = 29999;
  int64_t pool_size_hint = 0;  // workers expected eventually; see CheckCanEverRun
  // After a restart, how long jobs that were running wait for every rank's agent to register
  // again (naming the rank it still runs) before they are failed.
  absl::Duration adopt_timeout = absl::Seconds(20);
  // A LOST worker (it holds no job then) is dropped from the registry, ListWorkers and the
  // store's credentials this long after it was lost; so are workers of an earlier coordinator
  // that have not registered again this long after a restart.
  absl::Duration purge_lost_after = absl::Minutes(10);
  // A queued (or restarting) job that the pool cannot hold — more ranks than live workers of its
  // kind, after workers were lost — fails (cause "unschedulable") once that has lasted this long.
  absl::Duration unschedulable_timeout = absl::Minutes(10);
  // A rank whose agent took its assignment but has not reported its trainer started this long
  // after: its worker is declared lost (and blamed), rather than a healthy rank that times out
  // waiting for it at the rendezvous.
  absl::Duration start_timeout = absl::Seconds(30);
  // Every rank exited 0 but the store lacks some steps: how long every agent is asked for the
  // records (kept in the rank's work dir) before the job fails naming the missing steps.
  absl::Duration records_timeout = absl::Seconds(30);
  // Where heartbeat ages and the adoption deadline are measured; must outlive the Cluster. Only
  // the background tick's period (Start) runs on real time.
  Clock* clock = Clock::Real();
};

// Thread-safe. Start() runs the background tick (heartbeat checks, scheduling); Stop() ends it.
class Cluster {
 public:
  // How long a symptom (a rank that lost a peer) waits for the failure's cause; see the top.
  static constexpr absl::Duration kSymptomWindow = absl::Seconds(3);

  // `store` and `hub` must outlive the Cluster. Reconciles the store first: QUEUED jobs are queued
  // again; jobs that were ASSIGNED or RUNNING when an earlier coordinator stopped wait up to
  // adopt_timeout for their agents to register again with the rank they still run (trainers
  // outlive a coordinator outage; the agents replay the reports they buffered), and fail after
  // that, naming a rank that did not come back.
  static absl::StatusOr<std::unique_ptr<Cluster>> Create(JobStore* store, EventHub* hub,
                                                         ClusterOptions options);
  ~Cluster();

  void Start();
  void Stop();

  // JobService. Errors: INVALID_ARGUMENT for a config or device kind that does not validate,
  // FAILED_PRECONDITION for a world the pool can never provide, NOT_FOUND for unknown job ids.
  absl::StatusOr<JobRecord> Submit(const v1::SubmitJobRequest& request);
  absl::StatusOr<JobRecord> Cancel(const std::string& job_id);
  std::vector<v1::Worker> ListWorkers();

  // WorkerService.
  // Every registration gets a fresh credential (RegisterResponse.credential), of which only the
  // digest is kept, in memory and in the store. A request with previous_worker_id gets that id
  // back only when no live worker holds it and previous_credential is the id's stored credential
  // (otherwise it is registered as a new worker, and the refusal counted), and rank_adopted when
  // its running rank belongs to a job waiting for its ranks after a restart. A request with
  // requested_worker_id gets that id (never "worker-N"): ALREADY_EXISTS, naming the holder's host,
  // while a live worker holds it (WorkerRegistry::CheckFree); previous_worker_id is then only
  // proven when it is the same id. INVALID_ARGUMENT naming the field for a request
  // CheckRegisterRequest (worker_admission.h) refuses.
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request);
  // Binds an agent's Session to its worker id (the stream's first message) and sends Welcome
  // down it before anything else. NOT_FOUND when the coordinator does not know the id (it
  // restarted, or purged it): the agent registers again. UNAUTHENTICATED, with the worker's
  // current session left as it was, when `credential` is not the id's. A newer channel replaces
  // an older one. `channel` must stay valid until DetachSession(worker_id, channel).
  absl::Status AttachSession(const std::string& worker_id, const std::string& credential,
                             AgentChannel* channel);
  // The stream ended. The worker stays registered (not schedulable) until it reattaches or its
  // heartbeat times out. A stale channel is ignored.
  void DetachSession(const std::string& worker_id, AgentChannel* channel);
  // A message of `worker_id`'s session. RankStarted, RankReport, RankHung and RankExit are taken
  // only for the (job, rank, attempt) assigned to that worker now; a step record only for a step
  // 1..total_steps of the job. Anything else is refused, logged once per worker and reason, and
  // counted. A numbered message (seq > 0) whose seq this worker has already sent is taken once:
  // a repeat changes nothing. Returns "" when the message was taken (or was a repeat), else why it
  // was refused — what the session's Ack carries back.
  std::string OnAgentMessage(const std::string& worker_id, const v1::AgentMessage& message);

  // One tick of the background loop, callable from tests: expired adoptions, LOST workers, purged
  // workers, then scheduling.
  void Tick();

  // Sends `message` (a LogRequest) down `worker_id`'s session (cluster_logs.cc). UNAVAILABLE naming
  // the worker, its host and why when it is unknown (purged), LOST or between sessions.
  absl::Status SendToWorker(const std::string& worker_id, const v1::CoordinatorMessage& message);
  // Where the agents' LogChunks find their StreamLogs streams (expired by the background tick).
  LogRouter* log_router() { return &log_router_; }

  // What /metrics reports about the pool and the jobs (computed on demand).
  struct Counts {
    std::map<std::string, int> workers_by_state;  // "idle" | "busy" | "disconnected" | "lost"
    // "queued" | "assigned" | "running" | "restarting"
    std::map<std::string, int> active_jobs_by_state;
    std::map<std::string, int64_t> finished_jobs_by_state;  // since this process started
    int queue_length = 0;
    struct Progress {
      std::string job_id;
      int64_t step = 0;  // last step reported, 0 = none yet
      double loss = 0;
      int64_t straggler_rank = -1;  // named by the trainer as of `step`; -1 = none
      double straggler_ratio = 0;   // its compute / the median of the other ranks'; 0 = none
    };
    std::vector<Progress> running;  // ASSIGNED or RUNNING jobs
    // Refused agent messages since this process started, by reason: "bad_credential" (a Hello or
    // a re-registration without the worker's credential), "not_assigned" (a rank message for a
    // job and rank not assigned to the sender), "bad_step" (a step record outside the job's steps
    // or not parseable).
    std::map<std::string, int64_t> refused_agent_messages_by_reason;
    // Restarts since this process started, by the cause of the failure (JobError::cause).
    std::map<std::string, int64_t> restarts_by_cause;
    // Steps that restarted runs computed again (from their checkpoint up to where the failed run
    // had reported), since this process started.
    int64_t recomputed_steps = 0;
    // Heals in place since this process started, by the cause of the failure.
    std::map<std::string, int64_t> heals_by_cause;
    struct Restarts {
      std::string job_id;
      int restart_count = 0;
    };
    std::vector<Restarts> restarts;  // ASSIGNED, RUNNING or RESTARTING jobs
  };
  Counts GetCounts();

 private:
  // A job with ranks: ASSIGNED, RUNNING or RESTARTING, or final and still winding down. `run` is
  // its current (or, RESTARTING, its failed) run.
  struct RunningJob {
    JobRecord record;  // as last stored; record.mesh is run.mesh
    JobRun run;
    int64_t last_step = 0;
    double last_loss = 0;
    int64_t straggler_rank = -1;  // as of last_step's record (StepEvent), -1 when none named
    double straggler_ratio = 0;
    // A symptom (a rank that lost a peer) waiting until symptom_deadline for its cause.
    std::optional<JobError> symptom;
    absl::Time symptom_deadline;
    // RESTARTING: the earliest start of the next run, the step the failed run had reached, and
    // (elastic) the mesh the next run would take now (RestartingJobsLocked), worked out from the
    // job's config as parsed at its first restart.
    absl::Time restart_at;
    int64_t failed_at_step = 0;
    std::optional<ElasticMesh> restart_mesh;
    std::optional<JobConfig> elastic_config;
    bool awaiting_resume = false;  // the restarted run's first step record is still to come
    // Every rank exited 0 but these steps are not in the store: asked of every agent until
    // records_deadline (cluster_records.cc). Empty otherwise.
    std::vector<StepRange> missing_steps;
    absl::Time records_deadline;
    // Healing in place (cluster_heals.cc): the job's checkpoint.memory_interval (-1 until its
    // config is read), the newest step every rank can heal from (the records' snapshot_step)
    // and who holds whose copy (their snapshot_buddy_offset), and a heal under way: the index of
    // its failure in record.failures and when it was found.
    int64_t memory_interval = -1;
    int64_t snapshot_step = 0;
    int64_t snapshot_buddy_offset = 0;
    std::optional<size_t> healing_failure;
    absl::Time healing_since;
    // A rank's failure reported while the run was being adopted after a coordinator restart, for a
    // job that may heal: held until every rank is back (AllBack) with every live rank's session
    // attached, or until adoption expires, so the heal decision sees which ranks live and can
    // reach them.
    std::optional<JobError> failure_while_adopting;
  };
  // What GetCounts reports that only counting tells, since this process started.
  struct Tallies {
    std::map<std::string, int64_t> finished_jobs;      // by final state name
    std::map<std::string, int64_t> refused;            // by reason, see Counts
    std::map<std::string, int64_t> restarts_by_cause;  // see Counts
    int64_t recomputed_steps = 0;
    std::map<std::string, int64_t> heals_by_cause;  // see Counts
  };

  Cluster(JobStore* store, EventHub* hub, ClusterOptions options);
  absl::Status Reconcile();

  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a queued job, or the next run of a restarting one, on `mesh`.
  void StartJobLocked(const std::string& job_id, const std::vector<RankPlacement>& mesh)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The Assignment of `placement`'s rank in `job`'s current run.
  v1::CoordinatorMessage AssignmentMessage(const RunningJob& job, const RankPlacement& placement,
                                           const Worker& worker) const;
  absl::StatusOr<int> PickRendezvousPortLocked(const std::string& host)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a job to `to`, publishes the change; false (logged) when the store refuses.
  bool TransitionLocked(const std::string& job_id, JobState to, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ASSIGNED → RUNNING once every rank has started (or was adopted running).
  void MaybeMarkRunningLocked(const std::string& job_id, const RunningJob& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // cluster_restarts.cc. The current run of `job_id` failed with `cause` (the first cause of a run
  // wins): stops every rank of the run, records the failure, and moves the job to RESTARTING when
  // it has restarts left (and the failure is not one a restart repeats: a rejected config), else
  // to FAILED with every failure listed.
  void RunFailedLocked(const std::string& job_id, JobError cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank that lost a peer: held as the run's symptom until kSymptomWindow passes or a cause
  // arrives.
  // Healing in place (cluster_heals.cc, heal_policy.h): when DecideHeal says so, gives the lost
  // rank of `cause` to an idle worker as a replacement of the next generation and tells every
  // other rank's agent to rejoin; fills cause's recovery. False: restart or fail as usual.
  bool TryHealLocked(const std::string& job_id, RunningJob& job, JobError& cause,
                     bool restarts_left) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's checkpoint.memory_interval, read from its config once.
  int64_t MemoryIntervalLocked(RunningJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The healed world's first step record came: the heal's time goes into its failure.
  void HealedLocked(const std::string& job_id, RunningJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a coordinator restart, an adopted job's healing state from the store: the newest heal
  // point its last stored record named, and a heal that had not trained a step yet (its failure
  // healed, without recovery_seconds), whose time then counts from the failure.
  void ResumeHealingLocked(RunningJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunSymptomLocked(const std::string& job_id, JobError symptom)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Settles symptoms whose window has passed: a worker of the run whose session is down is the
  // cause, else the symptom itself.
  void SettleSymptomsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The restarting jobs as the scheduler sees them, to go ahead of the queue: on a smaller mesh
  // when elastic and the pool shrank; held (PendingJob::hold) with a wait reason until every rank
  // of the failed run has gone and the backoff has passed, so queued jobs cannot take the workers
  // meanwhile.
  std::vector<PendingJob> RestartingJobsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records why a queued or restarting job waits (in the store, when it changed).
  void SetWaitReasonLocked(const std::string& job_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails queued or restarting jobs the pool has not been able to hold for unschedulable_timeout.
  void FailUnschedulableLocked(const std::set<std::string>& unfit, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelRanksLocked(const RunningJob& job, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts a refused message under `reason` and logs it, once per worker and reason (`worker`
  // null: no registered worker to attribute it to; logged every time).
  void RefuseLocked(Worker* worker, const std::string& worker_id, const std::string& reason,
                    const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnRankStartedLocked(Worker& worker, const v1::RankStarted& started)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "" when taken (or ignored: not rank 0, after the run), else why it was refused.
  std::string OnRankReportLocked(Worker& worker, const v1::RankReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnRankHungLocked(Worker& worker, const v1::RankHung& hung)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnRankExitLocked(Worker& worker, const v1::RankExit& exit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseWorkerLocked(Worker& worker, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a finished job from running_ once every rank has exited or its worker is gone.
  void MaybeRetireLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-adopts a rank an agent still runs (Register after a restart); true when it was taken.
  bool AdoptRankLocked(Worker& worker, const std::string& job_id, int rank, int attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the run is still finding out who lives after a coordinator restart: adopting, and some
  // rank neither back and attached nor known to have exited.
  bool StillAdoptingLocked(const RunningJob& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decides the failure held while `job_id` was adopted (failure_while_adopting) once that is no
  // longer so (AdoptRankLocked, AttachSession).
  void DecideHeldFailureLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails restarted jobs whose ranks did not all come back by their deadline.
  void ExpireAdoptionsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Declares lost (and so blames) the worker of each rank that has not started start_timeout
  // after its run was assigned.
  void ExpireStartsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // cluster_records.cc. Every rank of `job`'s run exited 0: SUCCEEDED when the store holds every
  // step 1..total_steps, else the missing steps are asked of every agent (the job stays RUNNING,
  // its wait reason naming them) until records_timeout.
  void FinishRunLocked(const std::string& job_id, RunningJob& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `job`'s StepRecordsRequest to `worker` (when its session is up).
  void AskForStepsLocked(const std::string& job_id, const RunningJob& job, const Worker& worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An agent's answer: each record taken as a RankReport's; SUCCEEDED once no step is missing.
  // "" when taken or not wanted (the job no longer waits), else why it was refused.
  std::string OnStepRecordsLocked(Worker& worker, const v1::StepRecords& records)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails, for good, jobs whose missing steps did not arrive by records_deadline.
  void ExpireRecordWaitsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The checkpoint saves a step record announces, noted in the store with `from`'s
  // --checkpoint-root (JobStore::NoteCheckpoint; failures logged).
  void NoteCheckpointsLocked(const Worker& from, const StepEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores one parsed step record of a live job (the first record of a step is kept) and
  // publishes it; false when the store failed (logged).
  bool StoreStepLocked(RunningJob& job, const StepEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `job_id` off the queue; false when it was not queued.
  bool DequeueLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops workers lost (or, after a restart, absent) for purge_lost_after, here and in the store.
  void PurgeWorkersLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobStore* const store_;
  EventHub* const hub_;
  const ClusterOptions options_;

  absl::Mutex mu_;
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  std::vector<PendingJob> queue_ ABSL_GUARDED_BY(mu_);  // QUEUED jobs, oldest first
  // Why each queued or restarting job waits, as last stored.
  std::map<std::string, std::string> wait_reasons_ ABSL_GUARDED_BY(mu_);
  // ASSIGNED, RUNNING or RESTARTING jobs, and final ones still winding down (ranks not yet exited).
  std::map<std::string, RunningJob> running_ ABSL_GUARDED_BY(mu_);
  int next_port_ ABSL_GUARDED_BY(mu_);
  Tallies tallies_ ABSL_GUARDED_BY(mu_);
  // Queued or restarting jobs the pool cannot hold, and since when (see unschedulable_timeout).
  std::map<std::string, absl::Time> unfit_since_ ABSL_GUARDED_BY(mu_);

  LogRouter log_router_;  // its own lock, never taken while holding mu_

  absl::Notification stop_;
  std::thread ticker_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_CLUSTER_H_
