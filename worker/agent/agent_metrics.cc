#include "worker/agent/agent_metrics.h"

#include <cmath>
#include <limits>
#include <optional>

#include "absl/status/statusor.h"
#include "common/record/step_record.h"

namespace ringtrain {
namespace {

// Step-time buckets, seconds: 10 ms … 2 min, about ×2 apart.
std::vector<double> StepBuckets() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

}  // namespace

AgentMetrics::AgentMetrics() : step_seconds_(StepBuckets()) {}

void AgentMetrics::TrainerStarted(const std::string& job_id, int rank, int world_size) {
  absl::MutexLock lock(&mu_);
  ++starts_;
  busy_ = true;
  has_job_ = true;
  job_id_ = job_id;
  rank_ = rank;
  world_size_ = std::max(world_size, 1);
  step_seconds_ = FixedHistogram(StepBuckets());
  tokens_ = attention_seconds_ = comm_wait_seconds_ = bytes_sent_ = 0;
  checkpoint_stall_seconds_ = checkpoint_write_seconds_ = 0;
  step_ = 0;
  loss_ = grad_norm_ = lr_ = peak_memory_bytes_ = device_memory_peak_bytes_ = 0;
  attention_imbalance_ = 0;
}

void AgentMetrics::TrainerRecord(const std::string& json_line) {
  // A figure the record lacks reads NaN, and is skipped below rather than taken as 0.
  const absl::StatusOr<std::optional<StepRecord>> parsed =
      ParseStepRecord(json_line, MissingFigure::kNaN);
  if (!parsed.ok() || !parsed->has_value()) return;  // not a step record, or a malformed one
  const StepRecord& record = **parsed;
  absl::MutexLock lock(&mu_);
  if (!has_job_) return;
  step_ = record.step;
  loss_ = record.loss;  // NaN (JSON null) when the step diverged
  grad_norm_ = record.grad_norm;
  lr_ = record.lr;
  if (std::isfinite(record.attention_imbalance)) attention_imbalance_ = record.attention_imbalance;
  if (std::isfinite(record.step_seconds)) step_seconds_.Observe(record.step_seconds);
  // Every rank processes the same share of the step's global tokens.
  if (std::isfinite(record.tokens)) tokens_ += record.tokens / world_size_;
  if (std::isfinite(record.checkpoint_stall_seconds)) {
    checkpoint_stall_seconds_ += record.checkpoint_stall_seconds;
  }
  if (std::isfinite(record.checkpoint_write_seconds)) {
    checkpoint_write_seconds_ += record.checkpoint_write_seconds;
  }
  for (const RankFigures& mine : record.ranks) {
    if (mine.rank != rank_) continue;
    // Per-step figures accumulate into counters; skip a missing one rather than poison them.
    auto add = [](double* total, double v) {
      if (std::isfinite(v)) *total += v;
    };
    add(&attention_seconds_, mine.attention_seconds);
    add(&comm_wait_seconds_, mine.comm_wait_seconds);
    add(&bytes_sent_, mine.bytes_sent);
    if (std::isfinite(mine.peak_memory_bytes)) peak_memory_bytes_ = mine.peak_memory_bytes;
    // CUDA ranks only (0 on the CPU); trainers from before it existed leave it out.
    if (std::isfinite(mine.device_memory_peak_bytes)) {
      device_memory_peak_bytes_ = mine.device_memory_peak_bytes;
    }
  }
}

void AgentMetrics::TrainerExited(bool ok) {
  absl::MutexLock lock(&mu_);
  busy_ = false;
  ++(ok ? exits_ok_ : exits_failed_);
}

void AgentMetrics::HeartbeatSent() {
  absl::MutexLock lock(&mu_);
  heartbeat_sent_ = true;
  last_heartbeat_ = Clock::now();
}

void AgentMetrics::SetConnected(bool connected) {
  absl::MutexLock lock(&mu_);
  connected_ = connected;
}

std::vector<prometheus::MetricFamily> AgentMetrics::Collect() const {
  absl::MutexLock lock(&mu_);
  std::vector<prometheus::MetricFamily> families;
  auto single = [&](prometheus::MetricFamily family, bool counter, double value) {
    if (counter) {
      AddCounter(family, {}, value);
    } else {
      AddGauge(family, {}, value);
    }
    families.push_back(std::move(family));
  };
  single(CounterFamily("ringtrain_worker_trainer_starts_total",
                       "Trainer processes this agent has started."),
         true, static_cast<double>(starts_));
  auto exits = CounterFamily("ringtrain_worker_trainer_exits_total",
                             "Trainer processes that ended, by outcome (ok = exit status 0).");
  AddCounter(exits, {{"outcome", "ok"}}, static_cast<double>(exits_ok_));
  AddCounter(exits, {{"outcome", "failed"}}, static_cast<double>(exits_failed_));
  families.push_back(std::move(exits));
  const double age = heartbeat_sent_
                         ? std::chrono::duration<double>(Clock::now() - last_heartbeat_).count()
                         : std::numeric_limits<double>::quiet_NaN();
  single(GaugeFamily("ringtrain_worker_heartbeat_age_seconds",
                     "Seconds since the agent last sent a heartbeat to the coordinator."),
         false, age);
  single(
      GaugeFamily("ringtrain_worker_connected", "1 while the session with the coordinator is up."),
      false, connected_ ? 1 : 0);
  single(GaugeFamily("ringtrain_worker_busy", "1 while a trainer runs."), false, busy_ ? 1 : 0);

  if (!has_job_) return families;
  const MetricLabels labels = {{"job_id", job_id_}, {"rank", std::to_string(rank_)}};
  auto histogram = HistogramFamily("ringtrain_trainer_step_duration_seconds",
                                   "Wall time of each optimizer step.");
  step_seconds_.AddTo(histogram, labels);
  families.push_back(std::move(histogram));
  auto series = [&](prometheus::MetricFamily family, bool counter, double value) {
    if (counter) {
      AddCounter(family, labels, value);
    } else {
      AddGauge(family, labels, value);
    }
    families.push_back(std::move(family));
  };
  series(CounterFamily("ringtrain_trainer_tokens_total", "Tokens this rank has processed."), true,
         tokens_);
  series(GaugeFamily("ringtrain_trainer_step", "Last optimizer step reported."), false,
         static_cast<double>(step_));
  series(GaugeFamily("ringtrain_trainer_loss", "Training loss of the last step, nats per token."),
         false, loss_);
  series(GaugeFamily("ringtrain_trainer_grad_norm", "Global gradient norm before clipping."), false,
         grad_norm_);
  series(GaugeFamily("ringtrain_trainer_learning_rate", "Learning rate of the last step."), false,
         lr_);
  series(GaugeFamily("ringtrain_trainer_peak_memory_bytes", "Peak resident memory of this rank."),
         false, peak_memory_bytes_);
  series(GaugeFamily("ringtrain_trainer_device_memory_peak_bytes",
                     "Peak bytes the CUDA caching allocator held allocated for this rank during "
                     "its last step (0 on the CPU)."),
         false, device_memory_peak_bytes_);
  series(GaugeFamily("ringtrain_trainer_attention_imbalance",
                     "max / mean attention work (visible query-key pairs) per rank of a CP "
                     "group in the last step, the worst group: 1 is perfect balance."),
         false, attention_imbalance_);
  series(CounterFamily("ringtrain_trainer_attention_compute_seconds_total",
                       "Wall time this rank spent computing attention blocks."),
         true, attention_seconds_);
  series(CounterFamily("ringtrain_trainer_comm_wait_seconds_total",
                       "Wall time this rank waited on communication."),
         true, comm_wait_seconds_);
  series(CounterFamily("ringtrain_trainer_bytes_sent_total", "Bytes this rank sent to peers."),
         true, bytes_sent_);
  series(CounterFamily("ringtrain_trainer_checkpoint_stall_seconds_total",
                       "Training time held by checkpoint saves (rank 0's)."),
         true, checkpoint_stall_seconds_);
  series(
      CounterFamily("ringtrain_trainer_checkpoint_write_seconds_total",
                    "Time checkpoint writes took, in the background with async_mode (rank 0's)."),
      true, checkpoint_write_seconds_);
  return families;
}

}  // namespace ringtrain
