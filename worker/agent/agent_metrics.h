// The agent's Prometheus metrics: its own state and its trainer's figures, labelled {job_id, rank}.
// The trainer writes one JSON record per step on every rank (RINGTRAIN_JSONL_EVERY_RANK); each
// record (a StepRecord, common/record/step_record.h) holds the global figures and a `ranks` array
// with every rank's own, so this agent exports the global ones and its rank's entry. Only the
// current (or last) job's series exist: a new assignment replaces them, so the job_id label stays
// bounded. (Not `job`: Prometheus sets `job` on every series to the scrape job's name and would
// rename ours to exported_job.)
//   ringtrain_trainer_step_duration_seconds{job_id,rank}          histogram
//   ringtrain_trainer_tokens_total{job_id,rank}                   counter  this rank's tokens
//   ringtrain_trainer_step / _loss / _grad_norm / _learning_rate / _peak_memory_bytes  gauges
//   ringtrain_trainer_device_memory_peak_bytes{job_id,rank}    gauge   the rank's CUDA peak
//     (its record's ranks[].device_memory_peak_bytes; 0 on the CPU or from older trainers)
//   ringtrain_trainer_attention_compute_seconds_total, _comm_wait_seconds_total,
//   ringtrain_trainer_bytes_sent_total{job_id,rank}              counters
//   ringtrain_trainer_checkpoint_stall_seconds_total, _checkpoint_write_seconds_total{job_id,rank}
//     counters of the record's global figures: rank 0's checkpoint save stalls and write times
//   ringtrain_worker_trainer_starts_total                      counter
//   ringtrain_worker_trainer_exits_total{outcome="ok|failed"}  counter
//   ringtrain_worker_heartbeat_age_seconds                     gauge   since the last heartbeat
//   ringtrain_worker_connected, ringtrain_worker_busy          gauges  0 or 1
#ifndef RINGTRAIN_WORKER_AGENT_AGENT_METRICS_H_
#define RINGTRAIN_WORKER_AGENT_AGENT_METRICS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <prometheus/collectable.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metrics_server.h"

namespace ringtrain {

// Thread-safe.
class AgentMetrics : public prometheus::Collectable {
 public:
  AgentMetrics();

  void TrainerStarted(const std::string& job_id, int rank, int world_size);
  // One step record of the running trainer (JSON text, read with ParseStepRecord,
  // common/record/step_record.h); lines that are not step records, or that it refuses, are
  // ignored. A figure the record lacks (or holds as null) reads NaN: the loss, grad norm and
  // learning rate gauges show it, the counters, peaks and step-time histogram skip it.
  void TrainerRecord(const std::string& json_line);
  void TrainerExited(bool ok);
  void HeartbeatSent();
  void SetConnected(bool connected);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  using Clock = std::chrono::steady_clock;

  mutable absl::Mutex mu_;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point last_heartbeat_ ABSL_GUARDED_BY(mu_);
  bool heartbeat_sent_ ABSL_GUARDED_BY(mu_) = false;
  int64_t starts_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t exits_ok_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t exits_failed_ ABSL_GUARDED_BY(mu_) = 0;

  // The current (or last) trainer's series.
  bool has_job_ ABSL_GUARDED_BY(mu_) = false;
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  int rank_ ABSL_GUARDED_BY(mu_) = 0;
  int world_size_ ABSL_GUARDED_BY(mu_) = 1;
  FixedHistogram step_seconds_ ABSL_GUARDED_BY(mu_);
  double tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  double loss_ ABSL_GUARDED_BY(mu_) = 0;
  double grad_norm_ ABSL_GUARDED_BY(mu_) = 0;
  double lr_ ABSL_GUARDED_BY(mu_) = 0;
  double peak_memory_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  double device_memory_peak_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  double attention_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double comm_wait_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;
  double checkpoint_stall_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double attention_imbalance_ ABSL_GUARDED_BY(mu_) = 0;
  double checkpoint_write_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_AGENT_METRICS_H_
