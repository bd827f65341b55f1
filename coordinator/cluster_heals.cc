// Healing in place, the Cluster's half (the decision is heal_policy.h, the trainers' half
// worker/trainer/heal.h): a replacement for the lost rank on an idle worker, started as the next
// generation of the run; a Heal message for every other rank, whose agent tells its waiting
// trainer to rejoin at the new rendezvous; the recovery kept with its failure.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/job_config.h"
#include "common/log.h"
#include "common/record/step_record.h"
#include "coordinator/cluster.h"
#include "coordinator/heal_policy.h"

namespace ringtrain {

int64_t Cluster::MemoryIntervalLocked(RunningJob& job) {
  if (job.memory_interval < 0) {
    absl::StatusOr<JobConfig> config =
        ParseJobConfig(job.record.config_toml, job.record.overrides, "job config");
    job.memory_interval = config.ok() ? config->checkpoint.memory_interval : 0;
  }
  return job.memory_interval;
}

bool Cluster::TryHealLocked(const std::string& job_id, RunningJob& job, JobError& cause,
                            bool restarts_left) {
  if (MemoryIntervalLocked(job) <= 0) return false;
  JobRun& run = job.run;
  HealInputs in;
  in.memory_interval = job.memory_interval;
  in.snapshot_step = job.snapshot_step;
  in.buddy_offset = job.snapshot_buddy_offset;
  in.running = job.record.state == JobState::kRunning && !run.adopting;
  in.restarts_left = restarts_left;
  in.healing = job.healing_failure.has_value();
  in.lost_rank = cause.rank;
  in.lost_worker_id = cause.worker_id;
  in.world = run.size();
  for (const RankPlacement& p : run.mesh) {
    if (p.rank == cause.rank) continue;
    const Worker* w = workers_.Find(p.worker_id);
    if (run.exited.count(p.rank) != 0 || w == nullptr || w->state == WorkerState::kLost ||
        w->channel == nullptr || !w->OwnsRank(job_id, p.rank, run.attempt)) {
      in.also_gone.insert(p.rank);
    }
  }
  for (const auto& [id, w] : workers_.workers()) {
    if (w.state == WorkerState::kIdle && w.channel != nullptr &&
        w.info.device_kind == job.record.device_kind) {
      in.idle_workers.push_back(id);
    }
  }
  const HealDecision decision = DecideHeal(in);
  if (!decision.heal) {
    RT_LOG(Info) << job_id << ": rank " << cause.rank
                 << " is not healed in place: " << decision.why_not;
    return false;
  }
  const int rank = cause.rank;
  Worker& spare = *workers_.Find(decision.replacement_worker_id);
  const Worker* rank0 = rank == 0 ? &spare : workers_.Find(run.mesh[0].worker_id);
  absl::StatusOr<int> port = PickRendezvousPortLocked(rank0->info.address);
  if (!port.ok()) {
    RT_LOG(Warning) << job_id << ": rank " << rank << " is not healed in place: " << port.status();
    return false;
  }
  // A hung trainer still runs: its agent stops it (its exit is then not the rank's any more).
  if (Worker* lost = workers_.Find(cause.worker_id);
      lost != nullptr && lost->channel != nullptr && lost->OwnsRank(job_id, rank, run.attempt)) {
    v1::CoordinatorMessage stop;
    v1::Cancel* cancel = stop.mutable_cancel();
    cancel->set_job_id(job_id);
    cancel->set_reason("replaced by a heal in place: " + cause.message);
    cancel->set_rank(rank);
    cancel->set_attempt(run.attempt);
    lost->channel->Send(stop);
  }
  ++run.heal_generation;
  run.mesh[size_t(rank)].worker_id = spare.info.worker_id;
  run.master_addr = rank0->info.address;
  run.master_port = *port;
  run.exited.erase(rank);
  run.exited_ok.erase(rank);
  run.started.erase(rank);
  job.record.mesh = run.mesh;
  spare.Assign(job_id, rank, run.attempt);
  v1::CoordinatorMessage assignment = AssignmentMessage(job, run.mesh[size_t(rank)], spare);
  assignment.mutable_assignment()->set_heal_generation(run.heal_generation);
  spare.channel->Send(assignment);
  for (const RankPlacement& p : run.mesh) {
    if (p.rank == rank) continue;
    Worker* w = workers_.Find(p.worker_id);
    v1::CoordinatorMessage message;
    v1::Heal* heal = message.mutable_heal();
    heal->set_job_id(job_id);
    heal->set_rank(p.rank);
    heal->set_attempt(run.attempt);
    heal->set_generation(run.heal_generation);
    heal->set_master_addr(run.master_addr);
    heal->set_master_port(run.master_port);
    w->channel->Send(message);
  }
  cause.recovery = kRecoveryHealed;
  cause.replacement_worker_id = spare.info.worker_id;
  job.healing_since = options_.clock->Now();
  ++tallies_.heals_by_cause[cause.cause];
  const std::string message = absl::StrCat(
      cause.message, "; healing in place: rank ", rank, " now on ", spare.info.worker_id,
      " from its buddy's in-memory snapshot (step ", job.snapshot_step, " or newer), the other ",
      run.size() - 1, " rank(s) keep their processes; rendezvous ", run.master_addr, ":",
      run.master_port, " (generation ", run.heal_generation, ")");
  TransitionLocked(job_id, JobState::kRunning, message);
  return true;
}

void Cluster::ResumeHealingLocked(RunningJob& job) {
  const JobRecord& record = job.record;
  if (record.last_step > 0) {
    absl::StatusOr<std::vector<StepEvent>> last =
        store_->StepEvents(record.job_id, record.last_step, 1);
    if (last.ok() && !last->empty()) {
      absl::StatusOr<std::optional<StepRecord>> parsed =
          ParseStepRecord(last->front().record_json, MissingFigure::kZero);
      if (parsed.ok() && parsed->has_value()) {
        const StepRecord& r = **parsed;
        if (std::isfinite(r.snapshot_step)) job.snapshot_step = int64_t(r.snapshot_step);
        if (std::isfinite(r.snapshot_buddy_offset)) {
          job.snapshot_buddy_offset = int64_t(r.snapshot_buddy_offset);
        }
      }
    }
  }
  if (!record.failures.empty()) {
    const JobError& newest = record.failures.back();
    if (newest.recovery == kRecoveryHealed && newest.recovery_seconds == 0) {
      job.healing_failure = record.failures.size() - 1;
      job.healing_since = absl::FromUnixMillis(newest.unix_ms);
    }
  }
}

void Cluster::HealedLocked(const std::string& job_id, RunningJob& job) {
  if (!job.healing_failure) return;
  const size_t index = *job.healing_failure;
  job.healing_failure.reset();
  const double seconds = absl::ToDoubleSeconds(options_.clock->Now() - job.healing_since);
  absl::StatusOr<JobRecord> stored = store_->GetJob(job_id);
  if (!stored.ok() || index >= stored->failures.size()) return;
  stored->failures[index].recovery_seconds = seconds;
  job.record.failures = stored->failures;
  if (absl::Status s = store_->UpdateJob(*stored); !s.ok()) RT_LOG(Error) << "job store: " << s;
  RT_LOG(Info) << job_id << ": healed in place, training again " << seconds
               << " s after the failure was found (generation " << job.run.heal_generation << ")";
}

}  // namespace ringtrain
