// The job state machine over SQL: the mapping of JobRecord and its lists to columns, and each store
// operation as one short transaction. The tables are in job_store_schema.cc, what opening checks of
// a file's records in job_store_check.cc; SQLite's C API stays in sqlite_db.cc.
#include "coordinator/job_store.h"

#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/printable.h"
#include "common/status_macros.h"
#include "coordinator/job_store_check.h"
#include "coordinator/job_store_schema.h"
#include "coordinator/sqlite_db.h"
#include "nlohmann/json.hpp"

namespace ringtrain {
namespace {

constexpr const char* kJobColumns =
    "job_id, name, state, config_toml, overrides_json, world_size, dp, cp, mesh_json, wait_reason, "
    "error_json, submitted_unix_ms, started_unix_ms, finished_unix_ms, total_steps, last_step, "
    "last_loss, device_kind, restart_json";

absl::StatusOr<JobState> ParseState(const std::string& name) {
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

nlohmann::json ErrorToJson(const JobError& e) {
  return {{"rank", e.rank},
          {"worker_id", e.worker_id},
          {"exit_status", e.exit_status},
          {"stderr_tail", e.stderr_tail},
          {"message", e.message},
          {"cause", e.cause},
          {"step", e.step},
          {"unix_ms", e.unix_ms}};
}

JobError ErrorFromJson(const nlohmann::json& e) {
  return JobError{e.value("rank", -1),          e.value("worker_id", ""),
                  e.value("exit_status", 0),    e.value("stderr_tail", ""),
                  e.value("message", ""),       e.value("cause", ""),
                  e.value("step", int64_t{0}), e.value("unix_ms", int64_t{0})};
}

// NULL (nullopt) when the job has not failed.
std::optional<std::string> ErrorJson(const std::optional<JobError>& error) {
  if (!error) return std::nullopt;
  return ErrorToJson(*error).dump();
}

// The restart policy, the restarts so far with every failure, and an elastic restart's overrides.
std::string RestartJson(const JobRecord& job) {
  nlohmann::json failures = nlohmann::json::array();
  for (const JobError& e : job.failures) failures.push_back(ErrorToJson(e));
  return nlohmann::json{{"max_restarts", job.restart.max_restarts},
                        {"backoff_ms", job.restart.backoff_ms},
                        {"elastic", job.restart.elastic},
                        {"restart_count", job.restart_count},
                        {"failures", failures},
                        {"mesh_overrides", job.mesh_overrides}}
      .dump();
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
}

absl::StatusOr<nlohmann::json> ParseJsonColumn(const std::string& text, const char* column) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return absl::InternalError(absl::StrCat("job store column ", column, " is not JSON"));
  return j;
}

// Reads a row selected with kJobColumns.
absl::StatusOr<JobRecord> ReadJob(const Statement& s) {
  JobRecord job;
  job.job_id = s.Text(0);
  job.name = s.Text(1);
  RT_ASSIGN_OR_RETURN(job.state, ParseState(s.Text(2)));
  job.config_toml = s.Text(3);
  RT_ASSIGN_OR_RETURN(nlohmann::json overrides, ParseJsonColumn(s.Text(4), "overrides_json"));
  for (const auto& o : overrides) job.overrides.push_back(o.get<std::string>());
  job.degrees = {static_cast<int>(s.Int(5)), static_cast<int>(s.Int(6)), static_cast<int>(s.Int(7))};
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

// The id is a client's (GetJob, CancelJob, a page token): escaped and cut, as every echoed value is.
absl::Status NotFound(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("no job '", absl::CHexEscape(Excerpt(job_id)), "' in the job store"));
}

// Inserts `c` and sets its seq (the row's, increasing over the whole store).
absl::Status InsertStateChange(SqliteDb& db, StateChange& c) {
  Statement s(db,
              "INSERT INTO state_changes (job_id, from_state, to_state, message, unix_ms) "
              "VALUES (?, ?, ?, ?, ?)");
  s.Bind(1, c.job_id)
      .Bind(2, std::string(JobStateName(c.from)))
      .Bind(3, std::string(JobStateName(c.to)));
  s.Bind(4, c.message).Bind(5, c.unix_ms);
  RT_RETURN_IF_ERROR(s.Run());
  c.seq = db.LastInsertRowId();
  return absl::OkStatus();
}

}  // namespace

namespace {

// The refusal of a store at `path` that is damaged or lost records; `finding` says what is wrong.
// --new-store never takes such a file, so the remedy moves it away first.
absl::Status Damaged(const std::string& path, absl::string_view finding) {
  return absl::DataLossError(absl::StrCat(
      "job store '", path, "' is damaged: ", finding,
      ". Restore it from a backup, or move it away (with its -wal and -shm files) and start "
      "with --new-store to begin a new, empty store."));
}

// An error of opening the store at `path`; a file SQLite finds damaged (DATA_LOSS, sqlite_db.h)
// says what to do about it.
absl::Status OpenError(const std::string& path, const absl::Status& s) {
  if (s.code() != absl::StatusCode::kDataLoss) {
    return absl::Status(s.code(), absl::StrCat("job store '", path, "': ", s.message()));
  }
  return Damaged(path, absl::StrCat("SQLite says \"", s.message(), "\""));
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path, Clock* clock,
                                                         const JobStoreOptions& options) {
  bool in_memory = path == ":memory:" || path.rfind("file:", 0) == 0;
  if (!in_memory) {
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot open job store '", path, "': directory '", dir.string(),
                       "' does not exist; create it or choose another path"));
    }
  }
  RT_ASSIGN_OR_RETURN(StoreStampKeeper stamp,
                      StoreStampKeeper::BeforeOpen(path, options.new_store));
  absl::StatusOr<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(path, absl::Seconds(5));
  if (!db.ok()) {
    if (db.status().code() == absl::StatusCode::kDataLoss) return OpenError(path, db.status());
    return absl::Status(db.status().code(), absl::StrCat("cannot open job store '", path,
                                                         "': ", db.status().message()));
  }
  std::unique_ptr<JobStore> store(new JobStore(std::move(*db), path, clock, std::move(stamp)));
  {
    absl::MutexLock lock(&store->mu_);
    if (absl::Status s = store->db_->QuickCheck(); !s.ok()) return OpenError(path, s);
    // journal_mode answers "memory" for an in-memory database; that is fine. Every commit is
    // synced (FULL), so the stamp CreateJob writes after one never runs ahead of the store.
    for (const char* sql :
         {"PRAGMA journal_mode = WAL", "PRAGMA synchronous = FULL", "PRAGMA foreign_keys = ON"}) {
      absl::Status s = store->db_->Exec(sql);
      if (!s.ok()) return OpenError(path, s);
    }
    // A sound file may still have lost tables or rows (dropped or deleted by hand, a tool, a
    // partial restore): refused like damage, before the stamp compares the counter it keeps.
    absl::StatusOr<std::string> lost = PrepareSchema(*store->db_);
    if (!lost.ok()) return OpenError(path, lost.status());
    if (!lost->empty()) return Damaged(path, *lost);
    absl::StatusOr<int64_t> next = store->NextJobNumberLocked();
    if (!next.ok()) return OpenError(path, next.status());
    lost = FindLostRecords(*store->db_, *next);
    if (!lost.ok()) return OpenError(path, lost.status());
    if (!lost->empty()) return Damaged(path, *lost);
    RT_RETURN_IF_ERROR(store->stamp_.AfterOpen(*next, store->NowUnixMs()));
  }
  return store;
}

JobStore::JobStore(std::unique_ptr<SqliteDb> db, std::string path, Clock* clock,
                   StoreStampKeeper stamp)
    : db_(std::move(db)), path_(std::move(path)), clock_(clock), stamp_(std::move(stamp)) {}

JobStore::~JobStore() = default;

absl::StatusOr<int64_t> JobStore::NextJobNumberLocked() {
  Statement s(*db_, "SELECT value FROM counters WHERE name = 'next_job_number'");
  RT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return absl::InternalError(absl::StrCat("job store '", path_, "' has no job counter"));
  return s.Int(0);
}

absl::StatusOr<int64_t> JobStore::NextJobNumber() {
  absl::MutexLock lock(&mu_);
  return NextJobNumberLocked();
}

absl::StatusOr<JobRecord> JobStore::CreateJob(JobRecord job) {
  absl::MutexLock lock(&mu_);
  Transaction tx(*db_);
  RT_RETURN_IF_ERROR(tx.status());
  RT_ASSIGN_OR_RETURN(int64_t number, NextJobNumberLocked());
  job.job_id = JobIdForNumber(number);
  job.state = JobState::kQueued;
  job.submitted_unix_ms = NowUnixMs();
  job.started_unix_ms = job.finished_unix_ms = 0;
  job.last_step = 0;
  job.last_loss = 0;

  Statement insert(*db_, absl::StrCat("INSERT INTO jobs (job_number, ", kJobColumns, ") VALUES ",
                                      "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  insert.Bind(1, number)
      .Bind(2, job.job_id)
      .Bind(3, job.name)
      .Bind(4, std::string(JobStateName(job.state)));
  insert.Bind(5, job.config_toml).Bind(6, OverridesJson(job.overrides)).Bind(7, job.degrees.world);
  insert.Bind(8, job.degrees.dp).Bind(9, job.degrees.cp).Bind(10, MeshJson(job.mesh)).Bind(11, job.wait_reason);
  insert.Bind(12, ErrorJson(job.error)).Bind(13, job.submitted_unix_ms)
      .Bind(14, job.started_unix_ms)
      .Bind(15, job.finished_unix_ms);
  insert.Bind(16, job.total_steps).Bind(17, job.last_step).Bind(18, job.last_loss);
  insert.Bind(19, job.device_kind).Bind(20, RestartJson(job));
  RT_RETURN_IF_ERROR(insert.Run());

  Statement bump(*db_, "UPDATE counters SET value = ? WHERE name = 'next_job_number'");
  bump.Bind(1, number + 1);
  RT_RETURN_IF_ERROR(bump.Run());
  StateChange submitted{job.job_id, JobState::kQueued, JobState::kQueued, "submitted",
                        job.submitted_unix_ms};
  RT_RETURN_IF_ERROR(InsertStateChange(*db_, submitted));
  RT_RETURN_IF_ERROR(tx.Commit());
  stamp_.Record(number + 1, job.submitted_unix_ms);  // after the commit: may lag, never lead
  return job;
}

absl::StatusOr<JobRecord> JobStore::GetJobLocked(const std::string& job_id) {
  Statement s(*db_, absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE job_id = ?"));
  s.Bind(1, job_id);
  RT_ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return NotFound(job_id);
  return ReadJob(s);
}

absl::StatusOr<JobRecord> JobStore::GetJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return GetJobLocked(job_id);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListJobs() {
  absl::MutexLock lock(&mu_);
  Statement s(*db_, absl::StrCat("SELECT ", kJobColumns, " FROM jobs ORDER BY job_number"));
  return ReadJobs(s);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListJobsNewestFirst(const std::string& before_job_id,
                                                                      int64_t limit) {
  absl::MutexLock lock(&mu_);
  int64_t before = std::numeric_limits<int64_t>::max();
  if (!before_job_id.empty()) {
    Statement find(*db_, "SELECT job_number FROM jobs WHERE job_id = ?");
    find.Bind(1, before_job_id);
    RT_ASSIGN_OR_RETURN(bool found, find.Step());
    if (!found) return NotFound(before_job_id);
    before = find.Int(0);
  }
  Statement s(*db_, absl::StrCat("SELECT ", kJobColumns,
                                 " FROM jobs WHERE job_number < ? ORDER BY job_number DESC LIMIT ?"));
  s.Bind(1, before).Bind(2, limit);
  return ReadJobs(s);
}

absl::Status JobStore::UpdateJob(const JobRecord& job) {
  absl::MutexLock lock(&mu_);
  Statement s(
      *db_,
      "UPDATE jobs SET name = ?, config_toml = ?, overrides_json = ?, world_size = ?, dp = ?, "
      "cp = ?, mesh_json = ?, wait_reason = ?, error_json = ?, total_steps = ?, device_kind = ?, "
      "restart_json = ? WHERE job_id = ?");
  s.Bind(1, job.name).Bind(2, job.config_toml).Bind(3, OverridesJson(job.overrides));
  s.Bind(4, job.degrees.world).Bind(5, job.degrees.dp).Bind(6, job.degrees.cp).Bind(7, MeshJson(job.mesh));
  s.Bind(8, job.wait_reason).Bind(9, ErrorJson(job.error));
  s.Bind(10, job.total_steps).Bind(11, job.device_kind).Bind(12, RestartJson(job));
  s.Bind(13, job.job_id);
  RT_RETURN_IF_ERROR(s.Run());
  if (db_->Changes() == 0) return NotFound(job.job_id);
  return absl::OkStatus();
}

absl::StatusOr<StateChange> JobStore::TransitionJob(const std::string& job_id, JobState to,
                                                    const std::string& message) {
  absl::MutexLock lock(&mu_);
  Transaction tx(*db_);
  RT_RETURN_IF_ERROR(tx.status());
  RT_ASSIGN_OR_RETURN(JobRecord job, GetJobLocked(job_id));
  if (!IsAllowedTransition(job.state, to)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", job_id, "' cannot move from ", JobStateName(job.state), " to ",
                     JobStateName(to), IsTerminal(job.state) ? " (a final state)" : ""));
  }
  StateChange change{job_id, job.state, to, message, NowUnixMs()};
  if (to == JobState::kRunning && job.started_unix_ms == 0) job.started_unix_ms = change.unix_ms;
  if (IsTerminal(to)) job.finished_unix_ms = change.unix_ms;
  Statement s(*db_,
              "UPDATE jobs SET state = ?, started_unix_ms = ?, finished_unix_ms = ? "
              "WHERE job_id = ?");
  s.Bind(1, std::string(JobStateName(to)))
      .Bind(2, job.started_unix_ms)
      .Bind(3, job.finished_unix_ms);
  s.Bind(4, job_id);
  RT_RETURN_IF_ERROR(s.Run());
  RT_RETURN_IF_ERROR(InsertStateChange(*db_, change));
  RT_RETURN_IF_ERROR(tx.Commit());
  return change;
}

absl::StatusOr<bool> JobStore::AppendStepEvent(const StepEvent& e) {
  absl::MutexLock lock(&mu_);
  Transaction tx(*db_);
  RT_RETURN_IF_ERROR(tx.status());
  {
    Statement exists(*db_, "SELECT 1 FROM jobs WHERE job_id = ?");
    exists.Bind(1, e.job_id);
    RT_ASSIGN_OR_RETURN(bool row, exists.Step());
    if (!row) return NotFound(e.job_id);
  }
  Statement insert(*db_,
                   "INSERT OR IGNORE INTO step_events (job_id, step, loss, grad_norm, lr, "
                   "tokens_per_second, step_seconds, record_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  insert.Bind(1, e.job_id).Bind(2, e.step).Bind(3, e.loss).Bind(4, e.grad_norm).Bind(5, e.lr);
  insert.Bind(6, e.tokens_per_second).Bind(7, e.step_seconds).Bind(8, e.record_json);
  RT_RETURN_IF_ERROR(insert.Run());
  bool is_new = db_->Changes() > 0;
  if (is_new) {
    // The count lets Open tell a step event lost later from one that never arrived.
    Statement count(*db_,
                    "UPDATE jobs SET step_event_count = step_event_count + 1 WHERE job_id = ?");
    count.Bind(1, e.job_id);
    RT_RETURN_IF_ERROR(count.Run());
    Statement progress(
        *db_, "UPDATE jobs SET last_step = ?, last_loss = ? WHERE job_id = ? AND last_step <= ?");
    progress.Bind(1, e.step).Bind(2, e.loss).Bind(3, e.job_id).Bind(4, e.step);
    RT_RETURN_IF_ERROR(progress.Run());
  }
  RT_RETURN_IF_ERROR(tx.Commit());
  return is_new;
}

absl::StatusOr<std::vector<StepEvent>> JobStore::StepEvents(const std::string& job_id,
                                                            int64_t from_step, int64_t limit) {
  absl::MutexLock lock(&mu_);
  RT_RETURN_IF_ERROR(GetJobLocked(job_id).status());
  Statement s(*db_,
              "SELECT step, loss, grad_norm, lr, tokens_per_second, step_seconds, record_json "
              "FROM step_events WHERE job_id = ? AND step >= ? ORDER BY step LIMIT ?");
  s.Bind(1, job_id).Bind(2, from_step).Bind(3, limit > 0 ? limit : int64_t{-1});  // -1: no limit
  std::vector<StepEvent> events;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    events.push_back({job_id, s.Int(0), s.Double(1), s.Double(2), s.Double(3), s.Double(4),
                      s.Double(5), s.Text(6)});
  }
  return events;
}

absl::StatusOr<std::vector<int64_t>> JobStore::StoredSteps(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  RT_RETURN_IF_ERROR(GetJobLocked(job_id).status());
  Statement s(*db_, "SELECT step FROM step_events WHERE job_id = ? ORDER BY step");
  s.Bind(1, job_id);
  std::vector<int64_t> steps;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    steps.push_back(s.Int(0));
  }
  return steps;
}

absl::StatusOr<std::vector<StateChange>> JobStore::StateChanges(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  RT_RETURN_IF_ERROR(GetJobLocked(job_id).status());
  Statement s(*db_,
              "SELECT from_state, to_state, message, unix_ms, seq FROM state_changes "
              "WHERE job_id = ? ORDER BY seq");
  s.Bind(1, job_id);
  std::vector<StateChange> changes;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    RT_ASSIGN_OR_RETURN(JobState from, ParseState(s.Text(0)));
    RT_ASSIGN_OR_RETURN(JobState to, ParseState(s.Text(1)));
    changes.push_back({job_id, from, to, s.Text(2), s.Int(3), s.Int(4)});
  }
  return changes;
}

}  // namespace ringtrain
