// The coordinator's Prometheus metrics, computed at scrape time from the Cluster and the EventHub,
// plus a counter of finished RPCs by method and status code (the services call CountRpc).
//   ringtrain_coordinator_workers{state}               gauge   idle|busy|disconnected|lost
//   ringtrain_coordinator_jobs{state}                  gauge   queued|assigned|running|restarting
//   ringtrain_coordinator_jobs_finished_total{state}   counter succeeded|failed|cancelled
//   ringtrain_coordinator_queue_length                 gauge
//   ringtrain_coordinator_job_step{job_id}             gauge   running jobs only
//   ringtrain_coordinator_job_loss{job_id}             gauge   running jobs only
//   ringtrain_coordinator_rpcs_total{method,code}      counter
//   ringtrain_coordinator_events_fanned_out_total      counter events handed to watchers
//   ringtrain_coordinator_watchers                     gauge   open WatchJob streams
//   ringtrain_coordinator_refused_agent_messages_total{reason}  counter
//                                  bad_credential|not_assigned|bad_step (see Cluster::Counts)
//   ringtrain_coordinator_job_restarts_total{cause}    counter rank_exit|rank_hung|worker_lost|
//                                                              adopt_timeout
//   ringtrain_coordinator_job_restarts{job_id}    gauge   restarts of an unfinished job
//   ringtrain_coordinator_recomputed_steps_total       counter steps restarted runs computed again
//   ringtrain_coordinator_job_heals_total{cause}       counter lost ranks healed in place
#ifndef RINGTRAIN_COORDINATOR_COORDINATOR_METRICS_H_
#define RINGTRAIN_COORDINATOR_COORDINATOR_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/collectable.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/cluster.h"
#include "coordinator/event_hub.h"

namespace ringtrain {

// Counts finished RPCs. Thread-safe.
class RpcCounter {
 public:
  virtual ~RpcCounter() = default;
  virtual void CountRpc(const std::string& method, absl::StatusCode code) = 0;
};

// Thread-safe. `cluster` and `hub` must outlive it (and every scrape).
class CoordinatorMetrics : public prometheus::Collectable, public RpcCounter {
 public:
  CoordinatorMetrics(Cluster* cluster, EventHub* hub) : cluster_(cluster), hub_(hub) {}

  void CountRpc(const std::string& method, absl::StatusCode code) override;
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Cluster* const cluster_;
  EventHub* const hub_;
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> rpcs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_COORDINATOR_METRICS_H_
