#include "coordinator/coordinator_metrics.h"

#include <map>

#include "common/metrics/metrics_server.h"

namespace ringtrain {

void CoordinatorMetrics::CountRpc(const std::string& method, absl::StatusCode code) {
  absl::MutexLock lock(&mu_);
  ++rpcs_[{method, absl::StatusCodeToString(code)}];
}

std::vector<prometheus::MetricFamily> CoordinatorMetrics::Collect() const {
  const Cluster::Counts counts = cluster_->GetCounts();
  std::vector<prometheus::MetricFamily> families;

  auto workers = GaugeFamily("ringtrain_coordinator_workers", "Registered workers by state.");
  for (const auto& [state, n] : counts.workers_by_state) AddGauge(workers, {{"state", state}}, n);
  families.push_back(std::move(workers));

  auto jobs = GaugeFamily("ringtrain_coordinator_jobs", "Jobs not yet finished, by state.");
  for (const auto& [state, n] : counts.active_jobs_by_state) AddGauge(jobs, {{"state", state}}, n);
  families.push_back(std::move(jobs));

  auto finished = CounterFamily("ringtrain_coordinator_jobs_finished_total",
                                "Jobs that reached a final state since the coordinator started.");
  for (const auto& [state, n] : counts.finished_jobs_by_state) {
    AddCounter(finished, {{"state", state}}, static_cast<double>(n));
  }
  families.push_back(std::move(finished));

  auto queue =
      GaugeFamily("ringtrain_coordinator_queue_length", "Jobs waiting for workers (QUEUED).");
  AddGauge(queue, {}, counts.queue_length);
  families.push_back(std::move(queue));

  auto step = GaugeFamily("ringtrain_coordinator_job_step",
                          "Last optimizer step reported by a running job (0: none yet).");
  auto loss = GaugeFamily("ringtrain_coordinator_job_loss",
                          "Training loss at the last step of a running job, nats per token.");
  auto straggler_rank = GaugeFamily(
      "ringtrain_coordinator_job_straggler_rank",
      "The rank a running job's trainer names a straggler (consistently slower at computing than "
      "the other ranks) as of its last step; -1 when none.");
  auto straggler_ratio = GaugeFamily(
      "ringtrain_coordinator_job_straggler_ratio",
      "How much slower the named straggler computes: its compute time / the median of the other "
      "ranks'; 0 when none is named.");
  for (const Cluster::Counts::Progress& p : counts.running) {
    AddGauge(step, {{"job_id", p.job_id}}, static_cast<double>(p.step));
    if (p.step > 0) AddGauge(loss, {{"job_id", p.job_id}}, p.loss);
    AddGauge(straggler_rank, {{"job_id", p.job_id}}, static_cast<double>(p.straggler_rank));
    AddGauge(straggler_ratio, {{"job_id", p.job_id}}, p.straggler_ratio);
  }
  families.push_back(std::move(step));
  families.push_back(std::move(loss));
  families.push_back(std::move(straggler_rank));
  families.push_back(std::move(straggler_ratio));

  auto rpcs =
      CounterFamily("ringtrain_coordinator_rpcs_total", "Finished RPCs by method and status code.");
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, n] : rpcs_) {
      AddCounter(rpcs, {{"method", key.first}, {"code", key.second}}, static_cast<double>(n));
    }
  }
  families.push_back(std::move(rpcs));

  auto events = CounterFamily("ringtrain_coordinator_events_fanned_out_total",
                              "Job events handed to WatchJob streams (one per watcher).");
  AddCounter(events, {}, static_cast<double>(hub_->EventsDelivered()));
  families.push_back(std::move(events));

  auto watchers = GaugeFamily("ringtrain_coordinator_watchers", "Open WatchJob streams.");
  AddGauge(watchers, {}, hub_->WatcherCount());
  families.push_back(std::move(watchers));

  auto refused = CounterFamily("ringtrain_coordinator_refused_agent_messages_total",
                               "Agent messages refused (dropped) since the coordinator started: "
                               "wrong credential, a rank not assigned to the sender, a bad step.");
  for (const auto& [reason, n] : counts.refused_agent_messages_by_reason) {
    AddCounter(refused, {{"reason", reason}}, static_cast<double>(n));
  }
  families.push_back(std::move(refused));

  auto restarts = CounterFamily("ringtrain_coordinator_job_restarts_total",
                                "Job restarts since the coordinator started, by the cause of the "
                                "failure they recovered from.");
  std::map<std::string, int64_t> by_cause = {
      {kCauseRankExit, 0}, {kCauseRankHung, 0}, {kCauseWorkerLost, 0}, {kCauseAdoptTimeout, 0}};
  for (const auto& [cause, n] : counts.restarts_by_cause) by_cause[cause] = n;
  for (const auto& [cause, n] : by_cause) {
    AddCounter(restarts, {{"cause", cause}}, static_cast<double>(n));
  }
  families.push_back(std::move(restarts));

  auto restart_count = GaugeFamily("ringtrain_coordinator_job_restarts",
                                   "Restarts so far of a job not yet finished.");
  for (const Cluster::Counts::Restarts& r : counts.restarts) {
    AddGauge(restart_count, {{"job_id", r.job_id}}, r.restart_count);
  }
  families.push_back(std::move(restart_count));

  auto recomputed = CounterFamily("ringtrain_coordinator_recomputed_steps_total",
                                  "Steps that restarted runs computed again: from their "
                                  "checkpoint up to where the failed run had reported.");
  AddCounter(recomputed, {}, static_cast<double>(counts.recomputed_steps));
  families.push_back(std::move(recomputed));

  auto heals = CounterFamily("ringtrain_coordinator_job_heals_total",
                             "Lost ranks healed in place from in-memory snapshots (the other ranks "
                             "kept their processes) since the coordinator started, by the cause "
                             "of the failure.");
  std::map<std::string, int64_t> heals_by_cause = {
      {kCauseRankExit, 0}, {kCauseRankHung, 0}, {kCauseWorkerLost, 0}};
  for (const auto& [cause, n] : counts.heals_by_cause) heals_by_cause[cause] = n;
  for (const auto& [cause, n] : heals_by_cause) {
    AddCounter(heals, {{"cause", cause}}, static_cast<double>(n));
  }
  families.push_back(std::move(heals));
  return families;
}

}  // namespace ringtrain
