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

v1::Job ToProto(const JobRecord& job) {
  v1::Job out;
  out.set_job_id(job.job_id);
  out.set_name(job.name);
  out.set_state(ToProto(job.state));
  out.set_config_toml(job.config_toml);
  for (const std::string& o : job.overrides) out.add_overrides(o);
  out.set_device_kind(job.device_kind);
  out.set_world_size(job.world_size);
  out.set_dp(job.dp);
  out.set_cp(job.cp);
  for (const RankPlacement& p : job.mesh) {
    v1::RankPlacement* m = out.add_mesh();
    m->set_rank(p.rank);
    m->set_worker_id(p.worker_id);
    m->set_cp_group(p.cp_group);
    m->set_dp_index(p.dp_index);
  }
  out.set_wait_reason(job.wait_reason);
  if (job.error) {
    v1::JobError* e = out.mutable_error();
    e->set_rank(job.error->rank);
    e->set_worker_id(job.error->worker_id);
    e->set_exit_status(job.error->exit_status);
    e->set_stderr_tail(job.error->stderr_tail);
    e->set_message(job.error->message);
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
  SetTimestamp(change.unix_ms, c->mutable_time());
  return out;
}

}  // namespace ringtrain
