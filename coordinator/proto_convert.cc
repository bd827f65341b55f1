#include "coordinator/proto_convert.h"

namespace ringtrain {

v1::JobState ToProto(JobState state) {
  switch (state) {
    case JobState::kQueued: return v1::JOB_STATE_QUEUED;
    case JobState::kAssigned: return v1::JOB_STATE_ASSIGNED;
    case JobState::kRunning: return v1::JOB_STATE_RUNNING;
    case JobState::kSucceeded: return v1::JOB_STATE_SUCCEEDED;
    case JobState::kFailed: return v1::JOB_STATE_FAILED;
    case JobState::kCancelled: return v1::JOB_STATE_CANCELLED;
    case JobState::kRestarting: return v1::JOB_STATE_RESTARTING;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

void SetTimestamp(int64_t unix_ms, google::protobuf::Timestamp* out) {
  out->set_seconds(unix_ms / 1000);
  out->set_nanos(static_cast<int32_t>((unix_ms % 1000) * 1000000));
}

void ToProto(const JobError& error, v1::JobError* out) {
  out->set_rank(error.rank);
  out->set_worker_id(error.worker_id);
  out->set_exit_status(error.exit_status);
  out->set_stderr_tail(error.stderr_tail);
  out->set_message(error.message);
  out->set_cause(error.cause);
  out->set_step(error.step);
  out->set_recovery(error.recovery);
  out->set_replacement_worker_id(error.replacement_worker_id);
  out->set_recovery_seconds(error.recovery_seconds);
  if (error.unix_ms > 0) SetTimestamp(error.unix_ms, out->mutable_time());
}

v1::Job ToProto(const JobRecord& job) {
  v1::Job out;
  out.set_job_id(job.job_id);
  out.set_name(job.name);
  out.set_state(ToProto(job.state));
  out.set_config_toml(job.config_toml);
  for (const std::string& o : job.overrides) out.add_overrides(o);
  out.set_device_kind(job.device_kind);
  out.set_world_size(job.degrees.world);
  out.set_dp(job.degrees.dp);
  out.set_cp(job.degrees.cp);
  for (const RankPlacement& p : job.mesh) {
    v1::RankPlacement* m = out.add_mesh();
    m->set_rank(p.rank);
    m->set_worker_id(p.worker_id);
    m->set_cp_group(p.cp_group);
    m->set_dp_index(p.dp_index);
  }
  out.set_wait_reason(job.wait_reason);
  if (job.error) ToProto(*job.error, out.mutable_error());
  out.set_restart_count(job.restart_count);
  out.set_max_restarts(job.restart.max_restarts);
  for (const JobError& e : job.failures) ToProto(e, out.add_failures());
  for (const std::string& o : job.mesh_overrides) out.add_mesh_overrides(o);
  for (const std::string& w : job.warnings) out.add_warnings(w);
  if (job.load_from) {
    v1::CheckpointSource* source = out.mutable_load_from();
    source->set_job_id(job.load_from->job_id);
    source->set_step(job.load_from->step);
    source->set_model_only(job.load_from->model_only);
  }
  SetTimestamp(job.submitted_unix_ms, out.mutable_submitted_time());
  if (job.started_unix_ms > 0) SetTimestamp(job.started_unix_ms, out.mutable_started_time());
  if (job.finished_unix_ms > 0) SetTimestamp(job.finished_unix_ms, out.mutable_finished_time());
  out.set_last_step(job.last_step);
  out.set_total_steps(job.total_steps);
  out.set_last_loss(job.last_loss);
  return out;
}

v1::JobEvent ToProtoEvent(const StepEvent& event) {
  v1::JobEvent out;
  v1::StepEvent* s = out.mutable_step();
  s->set_job_id(event.job_id);
  s->set_step(event.step);
  s->set_loss(event.loss);
  s->set_grad_norm(event.grad_norm);
  s->set_lr(event.lr);
  s->set_tokens_per_second(event.tokens_per_second);
  s->set_step_seconds(event.step_seconds);
  s->set_record_json(event.record_json);
  return out;
}

v1::JobEvent ToProtoEvent(const StateChange& change) {
  v1::JobEvent out;
  v1::StateChange* c = out.mutable_state_change();
  c->set_job_id(change.job_id);
  c->set_from_state(ToProto(change.from));
  c->set_to_state(ToProto(change.to));
  c->set_message(change.message);
  c->set_seq(change.seq);
  SetTimestamp(change.unix_ms, c->mutable_time());
  return out;
}

}  // namespace ringtrain
