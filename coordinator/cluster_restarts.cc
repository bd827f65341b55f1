// The failure half of Cluster: what caused a run to fail, applying the restart policy
// (restart_policy.h decides whether and when the job restarts), on which mesh a restarting job
// starts again, the jobs the pool can no longer hold, and the ranks a restarted coordinator takes
// back. The entry points are in cluster.cc, scheduling and the rest of the lifecycle in
// cluster_jobs.cc.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config/job_config.h"
#include "common/log.h"
#include "coordinator/cluster.h"
#include "coordinator/elastic_mesh.h"
#include "coordinator/restart_policy.h"

namespace ringtrain {
namespace {

std::string Seconds(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(100)));
}

}  // namespace

void Cluster::RunFailedLocked(const std::string& job_id, JobError cause) {
  auto it = running_.find(job_id);
  if (it == running_.end()) return;
  RunningJob& job = it->second;
  if (job.record.state != JobState::kAssigned && job.record.state != JobState::kRunning) {
    return;  // the run's first cause wins; a stopped or finished run has had it
  }
  if (StillAdoptingLocked(job) && MemoryIntervalLocked(job) > 0) {
    if (!job.failure_while_adopting) {
      RT_LOG(Info) << job_id << ": " << cause.message
                   << "; deciding how to recover once every rank is back";
      job.failure_while_adopting = std::move(cause);
    }
    return;
  }
  job.failure_while_adopting.reset();
  const absl::Time now = options_.clock->Now();
  job.symptom.reset();
  job.run.adopting = false;
  cause.step = job.last_step;
  cause.unix_ms = absl::ToUnixMillis(now);
  absl::StatusOr<JobRecord> stored = store_->GetJob(job_id);
  if (!stored.ok()) {
    RT_LOG(Error) << "job store: " << stored.status();
    return;
  }
  JobRecord record = *std::move(stored);
  record.failures.push_back(cause);
  job.record.failures = record.failures;
  const RestartDecision decision = RestartPolicy::Decide(record, cause, now);
  if (decision.restart && TryHealLocked(job_id, job, cause, /*restarts_left=*/true)) {
    record.failures.back() = cause;  // with its recovery
    record.mesh = job.run.mesh;
    if (absl::Status s = store_->UpdateJob(record); !s.ok()) RT_LOG(Error) << "job store: " << s;
    job.record.failures = record.failures;
    job.record.mesh = record.mesh;
    job.healing_failure = record.failures.size() - 1;
    return;
  }
  if (decision.restart) {
    record.failures.back().recovery = kRecoveryRestarted;
    job.record.failures = record.failures;
    record.wait_reason = decision.wait_reason;
    if (absl::Status s = store_->UpdateJob(record); !s.ok()) RT_LOG(Error) << "job store: " << s;
    wait_reasons_[job_id] = record.wait_reason;
    job.restart_at = decision.restart_at;
    job.failed_at_step = job.last_step;
    ++tallies_.restarts_by_cause[cause.cause];
    TransitionLocked(job_id, JobState::kRestarting, decision.message);
    CancelRanksLocked(job, absl::StrCat("job restarting: ", cause.message));
    return;
  }
  record.error = decision.error;
  record.wait_reason.clear();
  if (absl::Status s = store_->UpdateJob(record); !s.ok()) RT_LOG(Error) << "job store: " << s;
  TransitionLocked(job_id, JobState::kFailed, decision.message);
  CancelRanksLocked(job, absl::StrCat("job failed: ", cause.message));
}

void Cluster::RunSymptomLocked(const std::string& job_id, JobError symptom) {
  auto it = running_.find(job_id);
  if (it == running_.end()) return;
  RunningJob& job = it->second;
  if (job.record.state != JobState::kAssigned && job.record.state != JobState::kRunning) return;
  if (job.symptom) return;  // the first symptom stands in until the cause is found
  RT_LOG(Info) << job_id << ": " << symptom.message << "; waiting up to "
               << absl::FormatDuration(kSymptomWindow) << " for the rank that caused it";
  job.symptom = std::move(symptom);
  job.symptom_deadline = options_.clock->Now() + kSymptomWindow;
}

void Cluster::SettleSymptomsLocked(absl::Time now) {
  std::vector<std::string> due;
  for (const auto& [id, job] : running_) {
    if (job.symptom && now >= job.symptom_deadline) due.push_back(id);
  }
  for (const std::string& id : due) {
    RunningJob& job = running_.at(id);
    JobError cause = *job.symptom;
    // A worker of the run whose session broke: its agent (and with it its trainer) is gone, which
    // is what the survivors noticed; it is not LOST yet only because its heartbeat timeout has
    // not passed.
    for (const RankPlacement& p : job.run.mesh) {
      const Worker* const w = workers_.Find(p.worker_id);
      if (job.run.exited.count(p.rank) != 0 || w == nullptr || w->channel != nullptr ||
          !w->OwnsRank(id, p.rank, job.run.attempt)) {
        continue;
      }
      const std::string noticed = cause.message;
      cause = JobError{};
      cause.rank = p.rank;
      cause.worker_id = p.worker_id;
      cause.exit_status = -1;
      cause.cause = kCauseWorkerLost;
      cause.message =
          absl::StrCat("worker ", p.worker_id, " (", w->info.host_label, ") running rank ", p.rank,
                       " lost its session (its agent stopped?); then ", noticed);
      break;
    }
    RunFailedLocked(id, std::move(cause));
  }
}

std::vector<PendingJob> Cluster::RestartingJobsLocked(absl::Time now) {
  std::map<std::string, int64_t> pool_by_kind = workers_.LiveByKind();
  std::vector<PendingJob> restarting;
  for (auto& [id, job] : running_) {
    if (job.record.state != JobState::kRestarting) continue;
    const JobRecord& r = job.record;
    PendingJob& pending =
        restarting.emplace_back(PendingJob{id, r.degrees, r.device_kind, /*hold=*/false});
    // Elastic: the largest mesh the pool holds now (the job's own when it fits again), from the
    // config parsed once for the job's restarts.
    if (r.restart.elastic) {
      if (!job.elastic_config) {
        absl::StatusOr<JobConfig> config = ParseJobConfig(r.config_toml, r.overrides, "job config");
        if (config.ok()) job.elastic_config = *std::move(config);
      }
      absl::StatusOr<ElasticMesh> mesh =
          job.elastic_config ? ElasticMeshFor(*job.elastic_config, pool_by_kind[r.device_kind])
                             : absl::InvalidArgumentError("the job's config no longer parses");
      if (mesh.ok()) {
        pending.degrees = mesh->degrees;
        job.restart_mesh = *std::move(mesh);
      } else {
        job.restart_mesh.reset();  // no smaller mesh either: it waits, and may be unfit
      }
    }
    if (std::optional<std::string> hold =
            RestartPolicy::HoldReason(r, job.run.StillRunning(), job.restart_at, now)) {
      pending.hold = true;
      SetWaitReasonLocked(id, *hold);
    }
  }
  return restarting;
}

void Cluster::FailUnschedulableLocked(const std::set<std::string>& unfit, absl::Time now) {
  for (auto it = unfit_since_.begin(); it != unfit_since_.end();) {
    it = unfit.count(it->first) != 0 ? std::next(it) : unfit_since_.erase(it);
  }
  std::vector<std::string> expired;
  for (const std::string& id : unfit) {
    const absl::Time since = unfit_since_.emplace(id, now).first->second;
    if (now - since >= options_.unschedulable_timeout) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    unfit_since_.erase(id);
    absl::StatusOr<JobRecord> record = store_->GetJob(id);
    if (!record.ok()) continue;
    JobError error;
    error.cause = kCauseUnschedulable;
    error.step = record->last_step;
    error.unix_ms = absl::ToUnixMillis(now);
    error.message = absl::StrCat(
        "FAILED_PRECONDITION: for ", absl::FormatDuration(options_.unschedulable_timeout),
        " (--unschedulable-timeout) the pool could not hold the job: ", wait_reasons_[id],
        "; add workers or resubmit it with a smaller mesh");
    record->failures.push_back(error);
    record->error = RestartPolicy::FinalError(*record, error, "");
    record->wait_reason.clear();
    if (absl::Status s = store_->UpdateJob(*record); !s.ok()) RT_LOG(Error) << "job store: " << s;
    DequeueLocked(id);
    wait_reasons_.erase(id);
    TransitionLocked(id, JobState::kFailed, record->error->message);
    MaybeRetireLocked(id);
  }
}

void Cluster::OnRankHungLocked(Worker& worker, const v1::RankHung& hung) {
  JobError cause;
  cause.rank = hung.rank();
  cause.worker_id = worker.info.worker_id;
  cause.exit_status = -1;
  cause.cause = kCauseRankHung;
  cause.message = absl::StrCat("rank ", hung.rank(), " on ", worker.info.worker_id, " (",
                               worker.info.host_label, ") is hung: ", hung.reason());
  RT_LOG(Warning) << hung.job_id() << ": " << cause.message;
  RunFailedLocked(hung.job_id(), std::move(cause));
}

bool Cluster::AdoptRankLocked(Worker& worker, const std::string& job_id, int rank, int attempt) {
  auto it = running_.find(job_id);
  if (it == running_.end() || !it->second.run.adopting) return false;
  RunningJob& job = it->second;
  JobRun& run = job.run;
  if (!run.HasRank(rank) || run.mesh[rank].worker_id != worker.info.worker_id ||
      attempt != run.attempt) {
    return false;
  }
  worker.Assign(job_id, rank, attempt);
  run.adopted.insert(rank);
  run.started.insert(rank);  // it was running all along
  MaybeMarkRunningLocked(job_id, job);
  if (run.AllAdopted()) {
    RT_LOG(Info) << job_id << ": every rank is back after the coordinator restart";
    if (!job.failure_while_adopting) run.adopting = false;  // else RunFailedLocked ends it
  }
  // A rank adopted and then reported as exited counts as adopted too: a held failure is decided
  // whether or not every rank was adopted.
  DecideHeldFailureLocked(job_id);
  return true;
}

bool Cluster::StillAdoptingLocked(const RunningJob& job) const {
  const JobRun& run = job.run;
  if (!run.adopting) return false;
  if (!run.AllBack()) return true;
  for (int rank : run.adopted) {
    if (run.exited.count(rank) != 0) continue;
    const Worker* w = workers_.Find(run.mesh[size_t(rank)].worker_id);
    if (w == nullptr || (w->state != WorkerState::kLost && w->channel == nullptr)) {
      return true;  // registered again, its session not yet up
    }
  }
  return false;
}

void Cluster::DecideHeldFailureLocked(const std::string& job_id) {
  auto it = running_.find(job_id);
  if (it == running_.end() || !it->second.failure_while_adopting ||
      StillAdoptingLocked(it->second)) {
    return;
  }
  RunFailedLocked(job_id, *it->second.failure_while_adopting);
}

void Cluster::ExpireAdoptionsLocked(absl::Time now) {
  std::vector<std::string> expired;
  for (const auto& [id, job] : running_) {
    if (job.run.adopting && now >= job.run.adopt_deadline) expired.push_back(id);
  }
  for (const std::string& id : expired) {
    RunningJob& job = running_.at(id);
    job.run.adopting = false;
    JobError error;
    for (const RankPlacement& p : job.run.mesh) {
      if (job.run.adopted.count(p.rank) != 0) continue;
      if (error.rank < 0) {
        error.rank = p.rank;
        error.worker_id = p.worker_id;
        error.exit_status = -1;
        error.cause = kCauseAdoptTimeout;
        error.message = absl::StrCat("the coordinator restarted and rank ", p.rank, "'s worker ",
                                     p.worker_id, " did not come back within ",
                                     absl::FormatDuration(options_.adopt_timeout));
      }
      job.run.exited.insert(p.rank);  // nobody will report it
    }
    RunFailedLocked(id, job.failure_while_adopting ? *job.failure_while_adopting : error);
    MaybeRetireLocked(id);
  }
}

void Cluster::ExpireStartsLocked(absl::Time now) {
  std::vector<std::pair<std::string, int>> late;  // (worker id, rank)
  for (const auto& [id, job] : running_) {
    if (job.record.state != JobState::kAssigned || job.run.adopting ||
        now - job.run.assigned_at < options_.start_timeout) {
      continue;
    }
    for (const RankPlacement& p : job.run.mesh) {
      if (job.run.started.count(p.rank) == 0 && job.run.exited.count(p.rank) == 0) {
        late.emplace_back(p.worker_id, p.rank);
      }
    }
  }
  // Every late rank's worker is lost: the first one's loss fails the run and blames it; the others
  // are freed (their ranks are stopped with the run) and not offered work again until they
  // register anew.
  for (const auto& [worker_id, rank] : late) {
    Worker* const w = workers_.Find(worker_id);
    if (w == nullptr || w->state == WorkerState::kLost) continue;
    LoseWorkerLocked(*w, absl::StrCat("it took rank ", rank,
                                      "'s assignment but did not start its "
                                      "trainer within ",
                                      Seconds(options_.start_timeout), " (--rank-start-timeout)"));
  }
}

}  // namespace ringtrain
