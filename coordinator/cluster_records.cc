// The step-record half of Cluster: rank 0's step reports into the store, and a finished run's
// last check that the store holds every step 1..total_steps — asking every agent for the records
// it lacks (each agent keeps its ranks' records in its work dir, across its own restarts) before
// the job may be SUCCEEDED, and failing the job naming the steps when none has them.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/record/step_record.h"
#include "coordinator/cluster.h"
#include "coordinator/load_source.h"
#include "coordinator/proto_convert.h"

namespace ringtrain {
namespace {

// Rank 0's step record (common/record/step_record.h) → a StepEvent; nullopt for a JSON object
// without "step" (a record that is not a step report, e.g. an eval's validation loss);
// INVALID_ARGUMENT for text that is not a JSON object, whose "step" is not an integer, or whose
// "ranks" is not an array of objects (the trainer never writes one: refused as bad_step). A figure
// the record lacks reads 0; a JSON null (how the trainer writes a NaN) reads NaN.
absl::StatusOr<std::optional<StepEvent>> StepEventOf(const std::string& job_id,
                                                     const std::string& json) {
  absl::StatusOr<std::optional<StepRecord>> parsed = ParseStepRecord(json, MissingFigure::kZero);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return std::nullopt;
  const StepRecord& record = **parsed;
  StepEvent event;
  event.job_id = job_id;
  event.step = record.step;
  event.loss = record.loss;
  event.grad_norm = record.grad_norm;
  event.lr = record.lr;
  event.tokens_per_second = record.tokens_per_second;
  event.step_seconds = record.step_seconds;
  if (std::isfinite(record.straggler_ratio) && record.straggler_ratio > 0 &&
      record.straggler_rank >= 0) {
    event.straggler_rank = static_cast<int64_t>(record.straggler_rank);
    event.straggler_ratio = record.straggler_ratio;
  }
  if (std::isfinite(record.snapshot_step)) event.snapshot_step = int64_t(record.snapshot_step);
  if (std::isfinite(record.snapshot_buddy_offset)) {
    event.snapshot_buddy_offset = int64_t(record.snapshot_buddy_offset);
  }
  if (std::isfinite(record.generation)) event.generation = int64_t(record.generation);
  if (std::isfinite(record.checkpoint_save_step)) {
    event.checkpoint_save_step = int64_t(record.checkpoint_save_step);
  }
  if (std::isfinite(record.checkpoint_commit_step)) {
    event.checkpoint_commit_step = int64_t(record.checkpoint_commit_step);
  }
  event.record_json = json;  // kept as the trainer wrote it
  return event;
}

}  // namespace

std::string Cluster::OnRankReportLocked(Worker& worker, const v1::RankReport& report) {
  if (report.rank() != 0) return "";  // every rank's record holds the same global figures
  // A report that arrives after the run ended (a rank finishing a step while it was being
  // stopped) is not part of the job's history: watchers have already seen the state change.
  auto running = running_.find(report.job_id());
  if (running == running_.end() || (running->second.record.state != JobState::kAssigned &&
                                    running->second.record.state != JobState::kRunning)) {
    RT_LOG(Info) << report.job_id() << " rank " << report.rank()
                 << ": report after the run ended, not recorded";
    return "";
  }
  RunningJob& job = running->second;
  absl::StatusOr<std::optional<StepEvent>> parsed =
      StepEventOf(report.job_id(), report.record_json());
  if (!parsed.ok()) {
    const std::string what =
        absl::StrCat(report.job_id(), " rank 0 sent ", parsed.status().message());
    RefuseLocked(&worker, worker.info.worker_id, "bad_step", what);
    return what;
  }
  const std::optional<StepEvent>& event = *parsed;
  if (!event) return "";  // not a step report: nothing to store
  const int64_t total = job.record.total_steps;
  if (event->step < 1 || event->step > total) {
    const std::string what = absl::StrCat(report.job_id(), " rank 0 sent a record for step ",
                                          event->step, ", outside the job's steps 1..", total);
    RefuseLocked(&worker, worker.info.worker_id, "bad_step", what);
    return what;
  }
  if (job.awaiting_resume) {
    // The restarted run's first step: it resumed from the checkpoint of the step before.
    job.awaiting_resume = false;
    const int64_t recomputed = std::max<int64_t>(0, job.failed_at_step - (event->step - 1));
    tallies_.recomputed_steps += recomputed;
    RT_LOG(Info) << report.job_id() << " run " << job.record.restart_count + 1
                 << " resumed after step " << event->step - 1 << ": " << recomputed
                 << " step(s) the failed run had reported are computed again";
  }
  job.snapshot_step = std::max(job.snapshot_step, event->snapshot_step);
  if (event->snapshot_buddy_offset > 0) job.snapshot_buddy_offset = event->snapshot_buddy_offset;
  if (event->generation == job.run.heal_generation) HealedLocked(report.job_id(), job);
  NoteCheckpointsLocked(worker, *event);
  StoreStepLocked(job, *event);
  return "";
}

void Cluster::NoteCheckpointsLocked(const Worker& from, const StepEvent& event) {
  // Every record counts, a repeated step's too: a restarted run may save the same step again.
  const std::pair<int64_t, bool> notes[] = {{event.checkpoint_save_step, false},
                                            {event.checkpoint_commit_step, true}};
  for (const auto& [step, complete] : notes) {
    if (step <= 0) continue;
    const absl::Status noted =
        store_->NoteCheckpoint(event.job_id, step, complete, from.checkpoint_root);
    if (!noted.ok()) {
      RT_LOG(Error) << event.job_id << " checkpoint " << step << ": " << noted;
    }
  }
}

bool Cluster::StoreStepLocked(RunningJob& job, const StepEvent& event) {
  // The first record of a step is the one kept (the store ignores a second for the same step):
  // a replay, or a step a restarted run computes again, changes nothing.
  absl::StatusOr<bool> added = store_->AppendStepEvent(event);
  if (!added.ok()) {
    RT_LOG(Error) << event.job_id << " step " << event.step << ": " << added.status();
    return false;
  }
  if (!*added) return true;
  if (event.step > job.last_step) {
    job.last_step = event.step;
    job.last_loss = event.loss;
    job.straggler_rank = event.straggler_rank;
    job.straggler_ratio = event.straggler_ratio;
  }
  hub_->Publish(event.job_id, ToProtoEvent(event));
  return true;
}

void Cluster::FinishRunLocked(const std::string& job_id, RunningJob& job) {
  std::vector<StepRange> missing;
  if (job.record.total_steps > 0) {
    absl::StatusOr<std::vector<int64_t>> stored = store_->StoredSteps(job_id);
    if (!stored.ok()) {
      RT_LOG(Error) << "job store: " << stored.status();
    } else {
      missing = MissingSteps(*stored, job.record.total_steps, FirstStep(job.record));
    }
  }
  if (missing.empty()) {
    TransitionLocked(job_id, JobState::kSucceeded, "every rank exited 0");
    return;
  }
  // The ranks are done, but a step they computed never reached the store: an agent died with
  // records it had not delivered, or this run resumed from a checkpoint past steps the store never
  // got. The records are on disk in the work dir of whichever agent ran rank 0 then.
  job.missing_steps = std::move(missing);
  job.records_deadline = options_.clock->Now() + options_.records_timeout;
  const std::string what = DescribeSteps(job.missing_steps);
  SetWaitReasonLocked(job_id, absl::StrCat("every rank exited 0; the store lacks the records of ",
                                           what, ": asking every agent for them"));
  RT_LOG(Warning) << job_id << ": every rank exited 0 but the store lacks the records of " << what
                  << "; asking every agent for them for "
                  << absl::FormatDuration(options_.records_timeout);
  for (const auto& [id, w] : workers_.workers()) AskForStepsLocked(job_id, job, w);
}

void Cluster::AskForStepsLocked(const std::string& job_id, const RunningJob& job,
                                const Worker& worker) {
  if (worker.channel == nullptr || worker.state == WorkerState::kLost) return;
  v1::CoordinatorMessage message;
  v1::StepRecordsRequest* request = message.mutable_step_records_request();
  request->set_job_id(job_id);
  request->set_rank(0);  // every rank writes the same global figures; rank 0's are the job's
  request->set_first_step(job.missing_steps.front().first);
  request->set_last_step(job.missing_steps.back().last);
  worker.channel->Send(message);
}

std::string Cluster::OnStepRecordsLocked(Worker& worker, const v1::StepRecords& records) {
  auto it = running_.find(records.job_id());
  if (it == running_.end() || it->second.missing_steps.empty() || records.rank() != 0 ||
      it->second.record.state != JobState::kRunning) {
    return "";  // not (or no longer) wanted: the job has them, or has ended (a cancel)
  }
  RunningJob& job = it->second;
  int64_t taken = 0;
  for (const std::string& json : records.record_json()) {
    absl::StatusOr<std::optional<StepEvent>> parsed = StepEventOf(records.job_id(), json);
    if (!parsed.ok() || !parsed->has_value() || (*parsed)->step < 1 ||
        (*parsed)->step > job.record.total_steps) {
      const std::string what = absl::StrCat(
          records.job_id(), " step records from its work dir: ",
          parsed.ok() ? "a record outside the job's steps" : parsed.status().message());
      RefuseLocked(&worker, worker.info.worker_id, "bad_step", what);
      return what;
    }
    NoteCheckpointsLocked(worker, **parsed);
    if (StoreStepLocked(job, **parsed)) ++taken;
  }
  absl::StatusOr<std::vector<int64_t>> stored = store_->StoredSteps(records.job_id());
  if (!stored.ok()) {
    RT_LOG(Error) << "job store: " << stored.status();
    return "";
  }
  const std::vector<StepRange> missing =
      MissingSteps(*stored, job.record.total_steps, FirstStep(job.record));
  if (missing.size() == job.missing_steps.size() &&
      CountSteps(missing) == CountSteps(job.missing_steps)) {
    return "";  // nothing new (an agent holding none, or the same records again)
  }
  RT_LOG(Info) << records.job_id() << ": " << worker.info.worker_id << " sent " << taken
               << " step records from its work dir"
               << (missing.empty() ? "; every step is stored"
                                   : absl::StrCat("; still missing: ", DescribeSteps(missing)));
  job.missing_steps = missing;
  if (!missing.empty()) return "";
  SetWaitReasonLocked(records.job_id(), "");
  wait_reasons_.erase(records.job_id());
  TransitionLocked(records.job_id(), JobState::kSucceeded,
                   absl::StrCat("every rank exited 0; the step records the store lacked came from ",
                                worker.info.worker_id, "'s work dir"));
  MaybeRetireLocked(records.job_id());
  return "";
}

void Cluster::ExpireRecordWaitsLocked(absl::Time now) {
  std::vector<std::string> expired;
  for (const auto& [id, job] : running_) {
    if (job.missing_steps.empty() || now < job.records_deadline) continue;
    if (job.record.state == JobState::kRunning) {
      expired.push_back(id);
    }
  }
  for (const std::string& id : expired) {
    RunningJob& job = running_.at(id);
    absl::StatusOr<JobRecord> record = store_->GetJob(id);
    if (!record.ok()) continue;
    JobError error;
    error.cause = kCauseStepsMissing;
    error.step = job.last_step;
    error.unix_ms = absl::ToUnixMillis(now);
    error.message = absl::StrCat(
        "DATA_LOSS: every rank exited 0, but the records of ", DescribeSteps(job.missing_steps),
        " of ", job.record.total_steps,
        " never reached the store, and no agent had them in its "
        "work dir within ",
        absl::FormatDuration(options_.records_timeout),
        " (the agent that holds them is gone or was given another --work-dir, or it pruned its "
        "rank folders); the "
        "run itself completed: its checkpoints hold the trained model, and `ringctl export` the "
        "steps that were stored");
    job.missing_steps.clear();
    record->failures.push_back(error);
    record->error = error;
    record->wait_reason.clear();
    if (absl::Status s = store_->UpdateJob(*record); !s.ok()) {
      RT_LOG(Error) << "job store: " << s;
    }
    wait_reasons_.erase(id);
    TransitionLocked(id, JobState::kFailed, error.message);
    MaybeRetireLocked(id);
  }
}

}  // namespace ringtrain
