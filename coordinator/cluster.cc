#include "coordinator/cluster.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/config/job_config.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "coordinator/admission.h"
#include "coordinator/job_checkpoints.h"
#include "coordinator/proto_convert.h"
#include "coordinator/restart_policy.h"
#include "coordinator/worker_admission.h"
#include "coordinator/worker_credential.h"

namespace ringtrain {
namespace {

// The refusal reasons of Counts::refused_agent_messages_by_reason (each exported, 0 or not).
constexpr const char* kRefusalReasons[] = {"bad_credential", "not_assigned", "bad_step"};

// `id` for a log line: an agent's text may hold control characters; at most 64 bytes of it.
std::string Printable(const std::string& id) {
  return absl::CHexEscape(id.size() > 64 ? id.substr(0, 64) + "..." : id);
}

// What the scheduler needs to know of a stored job.
PendingJob PendingJobOf(const JobRecord& job) { return {job.job_id, job.degrees, job.device_kind}; }

}  // namespace

Cluster::Cluster(JobStore* store, EventHub* hub, ClusterOptions options)
    : store_(store), hub_(hub), options_(options) {
  // Start at a random port of the range, so coordinators sharing a host rarely hand out the same.
  const int span = std::max(1, options.rendezvous_port_last - options.rendezvous_port_first + 1);
  next_port_ = options.rendezvous_port_first + static_cast<int>(std::random_device{}() % span);
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Create(JobStore* store, EventHub* hub,
                                                         ClusterOptions options) {
  if (options.rendezvous_port_first <= 0 ||
      options.rendezvous_port_last < options.rendezvous_port_first ||
      options.rendezvous_port_last > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous port range ", options.rendezvous_port_first, "-", options.rendezvous_port_last,
        " is not a range of TCP ports (e.g. 29500-29999)"));
  }
  std::unique_ptr<Cluster> cluster(new Cluster(store, hub, options));
  RT_RETURN_IF_ERROR(cluster->Reconcile());
  return cluster;
}

Cluster::~Cluster() { Stop(); }

absl::Status Cluster::Reconcile() {
  RT_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, store_->ListJobs());
  RT_ASSIGN_OR_RETURN(std::vector<std::string> stored_workers, store_->WorkerIds());
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock->Now();
  const absl::Time deadline = now + options_.adopt_timeout;
  // New worker ids must not collide with ids that agents coming back will ask for.
  for (const std::string& id : stored_workers) {
    workers_.Reserve(id);
    workers_.ExpectBack(id, now + options_.purge_lost_after);
  }
  int adopting = 0;
  int restarting = 0;
  for (JobRecord& job : jobs) {
    for (const RankPlacement& p : job.mesh) workers_.Reserve(p.worker_id);
    if (job.state == JobState::kQueued) {
      queue_.push_back(PendingJobOf(job));
    } else if (job.state == JobState::kRestarting) {
      // Its failed run's ranks were being stopped: agents that come back with one are told to
      // stop it (not adopted). The next run starts once they have had adopt_timeout to do so.
      RunningJob& running = running_[job.job_id];
      running.record = job;
      running.run.attempt = job.restart_count;
      running.run.mesh = job.mesh;
      running.last_step = running.failed_at_step = job.last_step;
      running.last_loss = job.last_loss;
      for (const RankPlacement& p : job.mesh) running.run.exited.insert(p.rank);
      running.restart_at =
          now + std::max(options_.adopt_timeout, absl::Milliseconds(job.restart.backoff_ms));
      ++restarting;
    } else if (!IsTerminal(job.state)) {
      RunningJob& running = running_[job.job_id];
      running.record = job;
      running.run.attempt = job.restart_count;
      running.run.mesh = job.mesh;
      running.last_step = job.last_step;
      running.last_loss = job.last_loss;
      running.run.adopting = true;
      running.run.heal_generation = HealsOfThisRun(job);  // the trainers' world generation
      ResumeHealingLocked(running);
      running.run.adopt_deadline = deadline;
      running.run.assigned_at = now;  // a rank not yet started has start_timeout from now
      if (job.state == JobState::kRunning) {
        for (const RankPlacement& p : job.mesh) running.run.started.insert(p.rank);
      }
      // master_addr stays empty: every rank was started before the restart, so no Assignment
      // is sent again (AttachSession).
      ++adopting;
    }
  }
  if (!queue_.empty()) {
    RT_LOG(Info) << queue_.size() << " queued job(s) found in the store";
  }
  if (restarting > 0) {
    RT_LOG(Info) << restarting << " job(s) were restarting: they start again after "
                 << absl::FormatDuration(options_.adopt_timeout) << " at the earliest";
  }
  if (adopting > 0) {
    RT_LOG(Info) << adopting << " job(s) were running: waiting up to "
                 << absl::FormatDuration(options_.adopt_timeout)
                 << " for their agents to come back";
  }
  return absl::OkStatus();
}

void Cluster::Start() {
  ticker_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(250))) {
      Tick();
      log_router_.Expire(absl::Now());  // outside mu_ (log_router.h's lock order)
    }
  });
}

void Cluster::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
}

absl::StatusOr<JobRecord> Cluster::Submit(const v1::SubmitJobRequest& request) {
  RT_ASSIGN_OR_RETURN(JobRecord job, AdmitSubmitRequest(request));
  RT_ASSIGN_OR_RETURN(job.load_from, ResolveLoadRequest(*store_, request));
  std::vector<std::string> warnings = std::move(job.warnings);
  absl::MutexLock lock(&mu_);
  RT_RETURN_IF_ERROR(
      CheckCanEverRun(PendingJobOf(job), workers_.Schedulable(), options_.pool_size_hint));

  RT_ASSIGN_OR_RETURN(JobRecord stored, store_->CreateJob(std::move(job)));
  if (stored.name.empty()) {
    stored.name = stored.job_id;
    RT_RETURN_IF_ERROR(store_->UpdateJob(stored));
  }
  queue_.push_back(PendingJobOf(stored));
  RT_LOG(Info) << "submitted " << stored.job_id << " (world " << stored.degrees.world << " = dp "
               << stored.degrees.dp << " x cp " << stored.degrees.cp << ", " << stored.device_kind
               << ")";
  ScheduleLocked();
  RT_ASSIGN_OR_RETURN(JobRecord reply, store_->GetJob(stored.job_id));
  reply.warnings = std::move(warnings);  // the reply's only: not stored
  return reply;
}

absl::StatusOr<JobRecord> Cluster::Cancel(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  RT_ASSIGN_OR_RETURN(JobRecord job, store_->GetJob(job_id));
  if (IsTerminal(job.state)) return job;
  TransitionLocked(job_id, JobState::kCancelled, "cancelled by a client");
  if (DequeueLocked(job_id)) wait_reasons_.erase(job_id);
  unfit_since_.erase(job_id);
  auto running = running_.find(job_id);
  if (running != running_.end()) {
    running->second.symptom.reset();
    running->second.restart_mesh.reset();
    CancelRanksLocked(running->second, "job cancelled by a client");
    MaybeRetireLocked(job_id);  // a restarting job whose ranks have all stopped holds nothing
  }
  ScheduleLocked();  // a cancelled queue head unblocks the jobs behind it
  return store_->GetJob(job_id);
}

std::vector<v1::Worker> Cluster::ListWorkers() {
  absl::MutexLock lock(&mu_);
  return workers_.List();
}

absl::StatusOr<v1::RegisterResponse> Cluster::Register(const v1::RegisterRequest& request) {
  RT_RETURN_IF_ERROR(CheckRegisterRequest(request));
  const std::string& kind = request.device_kind();
  RT_ASSIGN_OR_RETURN(const std::string credential, NewWorkerCredential());
  const std::string digest = CredentialDigest(credential);
  absl::MutexLock lock(&mu_);
  const std::string& previous = request.previous_worker_id();
  const std::string& requested = request.requested_worker_id();
  if (!requested.empty()) RT_RETURN_IF_ERROR(workers_.CheckFree(requested));
  bool proven = false;  // an agent back after a restart keeps its name (the job meshes use it)
  if (!previous.empty() && (requested.empty() || requested == previous) &&
      workers_.Find(previous) == nullptr) {
    RT_ASSIGN_OR_RETURN(const std::string stored, store_->WorkerCredential(previous));
    proven = CredentialMatches(request.previous_credential(), stored);
    if (!proven && !stored.empty()) {
      RefuseLocked(nullptr, previous, "bad_credential",
                   absl::StrCat("a Register naming it as previous_worker_id carries ",
                                request.previous_credential().empty() ? "no" : "a wrong",
                                " credential; registered as a new worker instead"));
    }
  }
  // An agent that asks for an id gets it (CheckFree above), proven or not; only a proven one gets
  // its rank back.
  const std::string id = proven ? previous : !requested.empty() ? requested : workers_.NewId();
  // Stored before the id is handed out: a restart right after still knows the credential.
  RT_RETURN_IF_ERROR(store_->PutWorkerCredential(id, digest));
  Worker& w = workers_.Register(id);
  w.info = {id, kind, request.host_label(), request.address(), false};
  w.device = request.device();
  w.device_name = request.device_name();
  w.device_memory_bytes = request.device_memory_bytes();
  w.checkpoint_root = ShownCheckpointRoot(request.checkpoint_root());
  w.credential_digest = digest;
  w.last_heartbeat = options_.clock->Now();
  w.last_seq = 0;  // a new registration: the agent re-sends what it has not had acknowledged
  const bool adopted = proven && !request.running_job_id().empty() &&
                       AdoptRankLocked(w, request.running_job_id(), request.running_rank(),
                                       request.running_attempt());
  RT_LOG(Info) << "registered " << id << " (" << request.device()
               << (request.device_name().empty() ? "" : " " + request.device_name()) << " on "
               << request.host_label() << ", address " << request.address() << ")"
               << (adopted ? absl::StrCat("; re-adopted ", request.running_job_id(), " rank ",
                                          request.running_rank())
                           : "");
  v1::RegisterResponse response;
  response.set_worker_id(id);
  response.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  response.set_rank_adopted(adopted);
  response.set_credential(credential);
  return response;
}

absl::Status Cluster::AttachSession(const std::string& worker_id, const std::string& credential,
                                    AgentChannel* channel) {
  absl::MutexLock lock(&mu_);
  Worker* const found = workers_.Find(worker_id);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown worker id \"", Printable(worker_id),
                                            "\" (the coordinator restarted?): register again"));
  }
  Worker& w = *found;
  if (!CredentialMatches(credential, w.credential_digest)) {
    RefuseLocked(&w, worker_id, "bad_credential",
                 absl::StrCat("a Hello with ", credential.empty() ? "no" : "a wrong",
                              " credential; its session is left as it was"));
    return absl::UnauthenticatedError(
        absl::StrCat("Hello for ", worker_id, " carries ", credential.empty() ? "no" : "a wrong",
                     " worker credential; send the credential Register returned for this id"));
  }
  if (w.state == WorkerState::kLost) {
    return absl::NotFoundError(absl::StrCat(worker_id, " was declared lost; register again"));
  }
  if (w.channel != nullptr && w.channel != channel) {
    w.channel->Close(absl::AbortedError("replaced by a newer session of the same worker"));
  }
  w.channel = channel;
  w.last_heartbeat = options_.clock->Now();
  v1::CoordinatorMessage welcome;  // first down the stream: the agent may now send its outbox
  welcome.mutable_welcome();
  channel->Send(welcome);
  RT_LOG(Info) << worker_id << " session attached";
  // The rank this worker holds: stopped if its run ended while the session was down (the job
  // finished, or is restarting); its Assignment sent again if it has not started yet (the last
  // one may have been lost with the old stream; an agent ignores one for a rank it already ran).
  if (w.state == WorkerState::kBusy) {
    auto running = running_.find(w.job_id);
    const bool live = running != running_.end() &&
                      (running->second.record.state == JobState::kAssigned ||
                       running->second.record.state == JobState::kRunning) &&
                      running->second.run.attempt == w.attempt;
    if (!live) {
      v1::CoordinatorMessage cancel;
      cancel.mutable_cancel()->set_job_id(w.job_id);
      cancel.mutable_cancel()->set_reason("its run has ended");
      cancel.mutable_cancel()->set_rank(w.rank);
      cancel.mutable_cancel()->set_attempt(w.attempt);
      channel->Send(cancel);
    } else if (running->second.run.started.count(w.rank) == 0 &&
               !running->second.run.master_addr.empty()) {
      channel->Send(AssignmentMessage(running->second, running->second.run.mesh.at(w.rank), w));
    }
  }
  // A failure held while this worker's job was adopted may wait only for this session.
  if (w.state == WorkerState::kBusy) DecideHeldFailureLocked(w.job_id);
  // An agent back (after its own restart, say) may hold the records a finished job still lacks.
  for (const auto& [id, job] : running_) {
    if (!job.missing_steps.empty()) AskForStepsLocked(id, job, w);
  }
  ScheduleLocked();
  return absl::OkStatus();
}

void Cluster::DetachSession(const std::string& worker_id, AgentChannel* channel) {
  absl::MutexLock lock(&mu_);
  Worker* const w = workers_.Find(worker_id);
  if (w == nullptr || w->channel != channel) return;
  w->channel = nullptr;
  RT_LOG(Warning) << worker_id << " session ended; lost unless it reconnects within "
                  << absl::FormatDuration(options_.worker_timeout);
}

std::string Cluster::OnAgentMessage(const std::string& worker_id, const v1::AgentMessage& message) {
  absl::MutexLock lock(&mu_);
  Worker* const found = workers_.Find(worker_id);
  if (found == nullptr) return "unknown worker";
  Worker& w = *found;
  // Its session was closed; nothing more is taken.
  if (w.state == WorkerState::kLost) return absl::StrCat(worker_id, " was declared lost");
  w.last_heartbeat = options_.clock->Now();
  // Which (job, rank, run) the message speaks for; only the worker running it may.
  const std::string* job_id = nullptr;
  int rank = 0;
  int attempt = 0;
  switch (message.msg_case()) {
    case v1::AgentMessage::kRankStarted:
      job_id = &message.rank_started().job_id();
      rank = message.rank_started().rank();
      attempt = message.rank_started().attempt();
      break;
    case v1::AgentMessage::kRankReport:
      job_id = &message.rank_report().job_id();
      rank = message.rank_report().rank();
      attempt = message.rank_report().attempt();
      break;
    case v1::AgentMessage::kRankHung:
      job_id = &message.rank_hung().job_id();
      rank = message.rank_hung().rank();
      attempt = message.rank_hung().attempt();
      break;
    case v1::AgentMessage::kRankExit:
      job_id = &message.rank_exit().job_id();
      rank = message.rank_exit().rank();
      attempt = message.rank_exit().attempt();
      break;
    case v1::AgentMessage::kStepRecords: return OnStepRecordsLocked(w, message.step_records());
    default: return "";  // Heartbeat (and a repeated Hello) only refresh last_heartbeat
  }
  // A message sent again (its Ack was lost with a broken stream) was taken the first time.
  if (message.seq() != 0) {
    if (message.seq() <= w.last_seq) return "";
    w.last_seq = message.seq();
  }
  if (!w.OwnsRank(*job_id, rank, attempt)) {
    const std::string what = absl::StrCat(
        "a rank message for ", Printable(*job_id), " rank ", rank, " run ", attempt + 1,
        ", which is not assigned to it (",
        w.state == WorkerState::kBusy
            ? absl::StrCat("it runs ", w.job_id, " rank ", w.rank, " run ", w.attempt + 1)
            : std::string("it runs nothing"),
        ")");
    RefuseLocked(&w, worker_id, "not_assigned", what);
    return what;
  }
  switch (message.msg_case()) {
    case v1::AgentMessage::kRankStarted: OnRankStartedLocked(w, message.rank_started()); break;
    case v1::AgentMessage::kRankReport: return OnRankReportLocked(w, message.rank_report());
    case v1::AgentMessage::kRankHung: OnRankHungLocked(w, message.rank_hung()); break;
    default: OnRankExitLocked(w, message.rank_exit()); break;
  }
  return "";
}

void Cluster::RefuseLocked(Worker* worker, const std::string& worker_id, const std::string& reason,
                           const std::string& what) {
  ++tallies_.refused[reason];
  if (worker != nullptr && !worker->refusals_logged.insert(reason).second) return;
  RT_LOG(Warning) << "refused for " << Printable(worker_id) << " (" << reason << "): " << what
                  << (worker != nullptr ? "; more of this kind are counted, not logged" : "");
}

void Cluster::PurgeWorkersLocked(absl::Time now) {
  for (const std::string& id : workers_.Purge(now, options_.purge_lost_after)) {
    if (absl::Status s = store_->DeleteWorker(id); !s.ok()) {
      RT_LOG(Error) << "job store: " << s;
    }
  }
}

bool Cluster::DequeueLocked(const std::string& job_id) {
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [&](const PendingJob& job) { return job.job_id == job_id; });
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

void Cluster::Tick() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock->Now();
  ExpireAdoptionsLocked(now);
  ExpireStartsLocked(now);
  ExpireRecordWaitsLocked(now);
  SettleSymptomsLocked(now);
  for (Worker* w : workers_.Silent(now, options_.worker_timeout)) {
    LoseWorkerLocked(*w, absl::StrCat("no heartbeat for ",
                                      absl::FormatDuration(absl::Trunc(now - w->last_heartbeat,
                                                                       absl::Milliseconds(100)))));
  }
  PurgeWorkersLocked(now);
  ScheduleLocked();
}

Cluster::Counts Cluster::GetCounts() {
  absl::MutexLock lock(&mu_);
  Counts counts;
  counts.workers_by_state = workers_.CountByState();
  counts.queue_length = static_cast<int>(queue_.size());
  counts.active_jobs_by_state = {
      {"queued", counts.queue_length}, {"assigned", 0}, {"running", 0}, {"restarting", 0}};
  for (const auto& [id, job] : running_) {
    if (IsTerminal(job.record.state)) continue;  // winding down; already counted as finished
    ++counts.active_jobs_by_state[absl::AsciiStrToLower(JobStateName(job.record.state))];
    counts.running.push_back(
        {id, job.last_step, job.last_loss, job.straggler_rank, job.straggler_ratio});
    counts.restarts.push_back({id, job.record.restart_count});
  }
  counts.restarts_by_cause = tallies_.restarts_by_cause;
  counts.recomputed_steps = tallies_.recomputed_steps;
  counts.heals_by_cause = tallies_.heals_by_cause;
  counts.finished_jobs_by_state = {{"succeeded", 0}, {"failed", 0}, {"cancelled", 0}};
  for (const auto& [state, n] : tallies_.finished_jobs) counts.finished_jobs_by_state[state] = n;
  for (const char* reason : kRefusalReasons) counts.refused_agent_messages_by_reason[reason] = 0;
  for (const auto& [reason, n] : tallies_.refused) {
    counts.refused_agent_messages_by_reason[reason] = n;
  }
  return counts;
}

}  // namespace ringtrain
