// The metric names ringtrain's processes export on /metrics: the one list that the Grafana
// dashboard (deploy/grafana/ringtrain.json), the Prometheus scrape config and the tests that read
// real /metrics output are checked against. Add a metric here when a process starts exporting it.
#ifndef RINGTRAIN_TESTS_INTEGRATION_METRIC_NAMES_H_
#define RINGTRAIN_TESTS_INTEGRATION_METRIC_NAMES_H_

#include <string>
#include <vector>

namespace ringtrain::testing {

struct MetricName {
  const char* name;     // the family name, as in "# TYPE name type"
  const char* type;     // "gauge", "counter" or "histogram"
  const char* process;  // "coordinator" (ringtrain-coordinator) or "worker" (ringtrain-worker)
  const char* labels;   // comma-separated label names, "" for none ("le" of a histogram aside)
};

inline constexpr MetricName kMetricNames[] = {
    // ringtrain-coordinator, --metrics-address (default 127.0.0.1:9460).
    {"ringtrain_coordinator_workers", "gauge", "coordinator", "state"},
    {"ringtrain_coordinator_jobs", "gauge", "coordinator", "state"},
    {"ringtrain_coordinator_jobs_finished_total", "counter", "coordinator", "state"},
    {"ringtrain_coordinator_queue_length", "gauge", "coordinator", ""},
    {"ringtrain_coordinator_job_step", "gauge", "coordinator", "job_id"},
    {"ringtrain_coordinator_job_loss", "gauge", "coordinator", "job_id"},
    {"ringtrain_coordinator_job_straggler_rank", "gauge", "coordinator", "job_id"},
    {"ringtrain_coordinator_job_straggler_ratio", "gauge", "coordinator", "job_id"},
    {"ringtrain_coordinator_rpcs_total", "counter", "coordinator", "method,code"},
    {"ringtrain_coordinator_events_fanned_out_total", "counter", "coordinator", ""},
    {"ringtrain_coordinator_watchers", "gauge", "coordinator", ""},
    {"ringtrain_coordinator_refused_agent_messages_total", "counter", "coordinator", "reason"},
    {"ringtrain_coordinator_job_restarts_total", "counter", "coordinator", "cause"},
    {"ringtrain_coordinator_job_restarts", "gauge", "coordinator", "job_id"},
    {"ringtrain_coordinator_recomputed_steps_total", "counter", "coordinator", ""},
    {"ringtrain_coordinator_job_heals_total", "counter", "coordinator", "cause"},
    // ringtrain-worker, --metrics-address (default 127.0.0.1:9470, else the next free port up to
    // 9569): its trainer's figures, labelled job_id and rank, and the agent's own.
    {"ringtrain_trainer_step_duration_seconds", "histogram", "worker", "job_id,rank"},
    {"ringtrain_trainer_tokens_total", "counter", "worker", "job_id,rank"},
    {"ringtrain_trainer_step", "gauge", "worker", "job_id,rank"},
    {"ringtrain_trainer_loss", "gauge", "worker", "job_id,rank"},
    {"ringtrain_trainer_grad_norm", "gauge", "worker", "job_id,rank"},
    {"ringtrain_trainer_learning_rate", "gauge", "worker", "job_id,rank"},
    {"ringtrain_trainer_peak_memory_bytes", "gauge", "worker", "job_id,rank"},
    {"ringtrain_trainer_device_memory_peak_bytes", "gauge", "worker", "job_id,rank"},
    {"ringtrain_trainer_attention_compute_seconds_total", "counter", "worker", "job_id,rank"},
    {"ringtrain_trainer_comm_wait_seconds_total", "counter", "worker", "job_id,rank"},
    {"ringtrain_trainer_bytes_sent_total", "counter", "worker", "job_id,rank"},
    {"ringtrain_trainer_checkpoint_stall_seconds_total", "counter", "worker", "job_id,rank"},
    {"ringtrain_trainer_attention_imbalance", "gauge", "worker", "job_id,rank"},
    {"ringtrain_trainer_checkpoint_write_seconds_total", "counter", "worker", "job_id,rank"},
    {"ringtrain_worker_trainer_starts_total", "counter", "worker", ""},
    {"ringtrain_worker_trainer_exits_total", "counter", "worker", "outcome"},
    {"ringtrain_worker_heartbeat_age_seconds", "gauge", "worker", ""},
    {"ringtrain_worker_connected", "gauge", "worker", ""},
    {"ringtrain_worker_busy", "gauge", "worker", ""},
};

// The series names a query may use: every family name, and for a histogram its _bucket, _sum and
// _count series instead of the bare name. `process` "" for both processes.
inline std::vector<std::string> SeriesNames(const std::string& process = "") {
  std::vector<std::string> names;
  for (const MetricName& m : kMetricNames) {
    if (!process.empty() && process != m.process) continue;
    if (std::string(m.type) == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        names.push_back(m.name + std::string(suffix));
    } else {
      names.push_back(m.name);
    }
  }
  return names;
}

}  // namespace ringtrain::testing

#endif  // RINGTRAIN_TESTS_INTEGRATION_METRIC_NAMES_H_
