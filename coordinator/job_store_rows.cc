// A JobRecord as a row of the jobs table: the lists, the error and the restart fields are JSON
// columns (nlohmann::json), the rest plain columns.
#include "coordinator/job_store_rows.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/printable.h"
#include "common/status_macros.h"
#include "coordinator/sqlite_db.h"
#include "nlohmann/json.hpp"

namespace ringtrain {
namespace {

nlohmann::json ErrorToJson(const JobError& e) {
  return {{"rank", e.rank},
          {"worker_id", e.worker_id},
          {"exit_status", e.exit_status},
          {"stderr_tail", e.stderr_tail},
          {"message", e.message},
          {"cause", e.cause},
          {"step", e.step},
          {"unix_ms", e.unix_ms},
          {"recovery", e.recovery},
          {"replacement_worker_id", e.replacement_worker_id},
          {"recovery_seconds", e.recovery_seconds}};
}

JobError ErrorFromJson(const nlohmann::json& e) {
  JobError error{e.value("rank", -1),         e.value("worker_id", ""),
                 e.value("exit_status", 0),   e.value("stderr_tail", ""),
                 e.value("message", ""),      e.value("cause", ""),
                 e.value("step", int64_t{0}), e.value("unix_ms", int64_t{0})};
  error.recovery = e.value("recovery", "");
  error.replacement_worker_id = e.value("replacement_worker_id", "");
  error.recovery_seconds = e.value("recovery_seconds", 0.0);
  return error;
}

void ReadRestartJson(const nlohmann::json& r, JobRecord* job) {
  job->restart.max_restarts = r.value("max_restarts", 0);
  job->restart.backoff_ms = r.value("backoff_ms", int64_t{5000});
  job->restart.elastic = r.value("elastic", false);
  job->restart_count = r.value("restart_count", 0);
  for (const auto& e : r.value("failures", nlohmann::json::array())) {
    job->failures.push_back(ErrorFromJson(e));
  }
  for (const auto& o : r.value("mesh_overrides", nlohmann::json::array())) {
    job->mesh_overrides.push_back(o.get<std::string>());
  }
  job->degrees.ulysses = r.value("ulysses", 1);
}

absl::StatusOr<nlohmann::json> ParseJsonColumn(const std::string& text, const char* column) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return absl::InternalError(absl::StrCat("job store column ", column, " is not JSON"));
  return j;
}

}  // namespace

absl::StatusOr<JobState> ParseJobState(const std::string& name) {
  auto state = JobStateFromName(name);
  if (!state)
    return absl::InternalError(absl::StrCat("job store holds unknown job state '", name, "'"));
  return *state;
}

std::string OverridesJson(const std::vector<std::string>& overrides) {
  return nlohmann::json(overrides).dump();
}

std::string MeshJson(const std::vector<RankPlacement>& mesh) {
  nlohmann::json out = nlohmann::json::array();
  for (const RankPlacement& p : mesh) {
    out.push_back({{"rank", p.rank},
                   {"worker_id", p.worker_id},
                   {"cp_group", p.cp_group},
                   {"dp_index", p.dp_index}});
  }
  return out.dump();
}

// NULL (nullopt) when the job has not failed.
std::optional<std::string> ErrorJson(const std::optional<JobError>& error) {
  if (!error) return std::nullopt;
  return ErrorToJson(*error).dump();
}

// The restart policy, the restarts so far with every failure, an elastic restart's overrides, and
// the mesh's Ulysses degree (placement; the degrees' other numbers have columns of their own).
std::string RestartJson(const JobRecord& job) {
  nlohmann::json failures = nlohmann::json::array();
  for (const JobError& e : job.failures) failures.push_back(ErrorToJson(e));
  return nlohmann::json{{"max_restarts", job.restart.max_restarts},
                        {"backoff_ms", job.restart.backoff_ms},
                        {"elastic", job.restart.elastic},
                        {"restart_count", job.restart_count},
                        {"failures", failures},
                        {"mesh_overrides", job.mesh_overrides},
                        {"ulysses", job.degrees.ulysses}}
      .dump();
}

std::string LoadJson(const std::optional<CheckpointLoad>& load) {
  if (!load) return "{}";
  return nlohmann::json{{"job_id", load->job_id},
                        {"folder", load->folder},
                        {"step", load->step},
                        {"model_only", load->model_only}}
      .dump();
}

// Reads a row selected with kJobColumns.
absl::StatusOr<JobRecord> ReadJob(const Statement& s) {
  JobRecord job;
  job.job_id = s.Text(0);
  job.name = s.Text(1);
  RT_ASSIGN_OR_RETURN(job.state, ParseJobState(s.Text(2)));
  job.config_toml = s.Text(3);
  RT_ASSIGN_OR_RETURN(nlohmann::json overrides, ParseJsonColumn(s.Text(4), "overrides_json"));
  for (const auto& o : overrides) job.overrides.push_back(o.get<std::string>());
  job.degrees = {static_cast<int>(s.Int(5)), static_cast<int>(s.Int(6)),
                 static_cast<int>(s.Int(7))};
  RT_ASSIGN_OR_RETURN(nlohmann::json mesh, ParseJsonColumn(s.Text(8), "mesh_json"));
  for (const auto& p : mesh) {
    job.mesh.push_back({p.value("rank", 0), p.value("worker_id", ""), p.value("cp_group", 0),
                        p.value("dp_index", 0)});
  }
  job.wait_reason = s.Text(9);
  if (!s.IsNull(10)) {
    RT_ASSIGN_OR_RETURN(nlohmann::json e, ParseJsonColumn(s.Text(10), "error_json"));
    job.error = ErrorFromJson(e);
  }
  job.submitted_unix_ms = s.Int(11);
  job.started_unix_ms = s.Int(12);
  job.finished_unix_ms = s.Int(13);
  job.total_steps = s.Int(14);
  job.last_step = s.Int(15);
  job.last_loss = s.Double(16);
  job.device_kind = s.Text(17);
  RT_ASSIGN_OR_RETURN(nlohmann::json restart, ParseJsonColumn(s.Text(18), "restart_json"));
  if (restart.is_object()) ReadRestartJson(restart, &job);
  RT_ASSIGN_OR_RETURN(nlohmann::json load, ParseJsonColumn(s.Text(19), "load_json"));
  if (load.is_object() && load.contains("job_id")) {
    job.load_from = CheckpointLoad{load.value("job_id", ""), load.value("folder", ""),
                                   load.value("step", int64_t{0}), load.value("model_only", true)};
  }
  return job;
}

// Every remaining row of `s` (selecting kJobColumns), in order.
absl::StatusOr<std::vector<JobRecord>> ReadJobs(Statement& s) {
  std::vector<JobRecord> jobs;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    RT_ASSIGN_OR_RETURN(JobRecord job, ReadJob(s));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

// The id is a client's (GetJob, CancelJob, a page token): escaped and cut, as every echoed value
// is.
absl::Status JobNotFound(const std::string& job_id) {
  return absl::NotFoundError(
      absl::StrCat("no job '", absl::CHexEscape(Excerpt(job_id)), "' in the job store"));
}

}  // namespace ringtrain
