// The trainer side of the Agent: what the coordinator asks of this worker's ranks (an assignment, a
// cancel, the step records of a rank that ran here) and giving up a rank whose registration the
// coordinator has forgotten. (The session that brings the asks is agent_session.cc; the rank
// itself, rank_slot.h.)
#include "worker/agent/agent.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/config/job_config.h"
#include "common/log.h"
#include "common/record/heal_instruction.h"
#include "common/status_macros.h"
#include "common/trainer_exit.h"
#include "worker/agent/job_paths.h"
#include "worker/agent/rank_dirs.h"
#include "worker/agent/step_records.h"

namespace ringtrain {
namespace {

// The job's paths resolved under this agent's roots (job_paths.h), as overrides that follow the
// job's own, so the trainer opens only what was checked, and the checkpoint another job left it
// (Assignment.load). Nothing is read or written before.
absl::StatusOr<std::vector<std::string>> ConfinedPaths(const AgentOptions& options,
                                                       const v1::Assignment& a,
                                                       const JobConfig& config) {
  RT_ASSIGN_OR_RETURN(
      std::vector<std::string> paths,
      ResolveJobPaths(config, JobRoots{options.data_root, options.checkpoint_root}, a.job_id()));
  if (a.has_load()) {
    const v1::CheckpointLoad& load = a.load();
    RT_ASSIGN_OR_RETURN(std::vector<std::string> more,
                        ResolveCheckpointLoad(load.job_id(), load.folder(), load.step(),
                                              load.model_only(), options.checkpoint_root));
    paths.insert(paths.end(), more.begin(), more.end());
  }
  return paths;
}

// When the rank counts as hung (hang_detector.h), from the job's collective timeout: its beats
// silent for comm.timeout_seconds, but at least 5 s (a loaded machine may delay a beat) and at
// most 10 s (a stopped process is found well before its peers' collectives time out); and, when
// it has peers, computing for comm.timeout_seconds (at least 5 s) without reaching a collective
// or a step boundary — by then its peers' collectives have timed out waiting for it.
HangLimits HangLimitsFor(const JobConfig& config, int world_size) {
  using std::chrono::milliseconds;
  const milliseconds timeout(static_cast<int64_t>(config.comm.timeout_seconds * 1000));
  HangLimits hang;
  hang.silence_limit = std::clamp(timeout, milliseconds(5000), milliseconds(10000));
  if (world_size > 1) hang.stall_limit = std::max(timeout, milliseconds(5000));
  return hang;
}

// Writes the assignment's config to <work_dir>/<job_id>/rank-<rank>/config.toml and describes the
// trainer to start for it.
absl::StatusOr<RankLaunch> PrepareLaunch(const AgentOptions& options, const v1::Assignment& a) {
  RT_RETURN_IF_ERROR(CheckJobId(a.job_id()));
  const std::vector<std::string> overrides(a.overrides().begin(), a.overrides().end());
  RT_ASSIGN_OR_RETURN(JobConfig config,
                      ParseJobConfig(a.config_toml(), overrides, "of the assignment"));
  RT_ASSIGN_OR_RETURN(std::vector<std::string> confined, ConfinedPaths(options, a, config));
  RankLaunch launch;
  launch.hang = HangLimitsFor(config, a.world_size());
  launch.work_dir = absl::StrCat(options.work_dir, "/", a.job_id(), "/rank-", a.rank());
  std::error_code ec;
  std::filesystem::create_directories(launch.work_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create '", launch.work_dir, "': ", ec.message()));
  }
  launch.config_path = launch.work_dir + "/config.toml";
  std::ofstream out(launch.config_path, std::ios::trunc);
  out << a.config_toml();
  out.close();
  if (!out) {
    return absl::InternalError(absl::StrCat("cannot write '", launch.config_path, "'"));
  }
  launch.trainer_path = options.trainer_path;
  for (const std::string& o : a.overrides()) {
    launch.overrides.push_back(absl::StartsWith(o, "--") ? o : "--" + o);
  }
  launch.overrides.insert(launch.overrides.end(), confined.begin(), confined.end());
  launch.rank = a.rank();
  launch.world_size = a.world_size();
  launch.master_addr = a.master_addr();
  launch.master_port = a.master_port();
  launch.host_address = options.advertise_address;
  launch.device = options.device;
  launch.threads = options.threads;
  launch.heal_generation = a.heal_generation();
  return launch;
}

}  // namespace

void Agent::HandleAssignment(const v1::Assignment& a) {
  RT_LOG(Info) << "assignment: job " << a.job_id() << " rank " << a.rank() << " of "
               << a.world_size() << ", rendezvous " << a.master_addr() << ":" << a.master_port();
  if (!a.device().empty() && a.device() != options_.device) {
    RT_LOG(Warning) << "the assignment names device " << a.device() << "; this agent runs "
                    << options_.device;
  }
  {
    absl::MutexLock lock(&mu_);
    const RankSlot::Info rank = rank_.info();
    if (rank.job_id == a.job_id() && rank.rank == a.rank() && rank.attempt == a.attempt() &&
        rank_generation_ == a.heal_generation()) {
      // Sent again by a coordinator that has not yet read its RankStarted: its messages are on
      // their way (the outbox keeps them until acknowledged).
      RT_LOG(Warning) << "job " << a.job_id() << " rank " << a.rank() << " run " << a.attempt() + 1
                      << (rank.active ? " is already running" : " already ran")
                      << " here; ignoring the repeated assignment";
      return;
    }
    if (rank.active || stop_requested_) {
      const std::string why = stop_requested_
                                  ? absl::StrCat("agent ", worker_id_, " is shutting down")
                                  : absl::StrCat("agent ", worker_id_, " is busy with job ",
                                                 rank.job_id, " rank ", rank.rank);
      RT_LOG(Warning) << "refusing job " << a.job_id() << " rank " << a.rank() << ": " << why;
      QueueLocked(RankExitMessage(a.job_id(), a.rank(), a.attempt(), kAgentExitBusy, 0, why));
      return;
    }
  }
  rank_.Release();  // the last rank's supervisor, outside mu_ (it has ended)

  // Assignments arrive on this thread only, so no other rank can start in between. Room for this
  // rank's folder first (rank_dirs.h): the oldest beyond --keep-rank-dirs go.
  if (CheckJobId(a.job_id()).ok()) {
    const std::string dir = absl::StrCat(options_.work_dir, "/", a.job_id(), "/rank-", a.rank());
    for (const std::string& removed : PruneRankDirs(options_.work_dir, options_.keep_rank_dirs - 1,
                                                    dir, options_.checkpoint_root)) {
      RT_LOG(Info) << "removed the rank folder " << removed << " (keeping the last "
                   << options_.keep_rank_dirs << ", --keep-rank-dirs)";
    }
  }
  absl::StatusOr<RankLaunch> launch = PrepareLaunch(options_, a);
  absl::Status started = launch.status();
  if (started.ok()) started = rank_.Start(*launch, a.job_id(), a.attempt());
  if (started.ok()) {
    {
      absl::MutexLock lock(&mu_);
      rank_generation_ = a.heal_generation();
      rank_work_dir_ = launch->work_dir;
    }
    WakeWriter();  // for the RankStarted
    return;
  }
  RT_LOG(Error) << "cannot start job " << a.job_id() << " rank " << a.rank() << ": " << started;
  // What the request itself asks wrongly (a path out of the roots, no data root) is a refusal the
  // coordinator reports as the job's cause; anything else is this machine failing to start it.
  const bool refused = !launch.ok() && (started.code() == absl::StatusCode::kInvalidArgument ||
                                        started.code() == absl::StatusCode::kFailedPrecondition);
  absl::MutexLock lock(&mu_);
  QueueLocked(RankExitMessage(a.job_id(), a.rank(), a.attempt(),
                              refused ? kAgentExitRefused : kAgentExitStartFailed, 0,
                              std::string(started.message())));
}

void Agent::HandleCancel(const v1::Cancel& cancel) {
  const RankSlot::Info rank = rank_.info();
  if (!rank.active || rank.job_id != cancel.job_id() || rank.rank != cancel.rank() ||
      rank.attempt != cancel.attempt()) {
    // The coordinator still counts this worker as running the rank, so it has not read how it
    // ended: the rank's exit goes again (or, if it never ran here, an exit saying so), so the
    // worker is freed whatever was lost.
    if (rank_.RequeueExit(cancel.job_id(), cancel.rank(), cancel.attempt())) {
      RT_LOG(Info) << "cancel for job " << cancel.job_id() << " rank " << cancel.rank()
                   << ": it has already ended here; its exit is sent again";
    } else {
      RT_LOG(Info) << "cancel for job " << cancel.job_id() << " rank " << cancel.rank()
                   << ": it never ran here; telling the coordinator so";
      absl::MutexLock lock(&mu_);
      QueueLocked(RankExitMessage(cancel.job_id(), cancel.rank(), cancel.attempt(),
                                  kAgentExitStartFailed, 0,
                                  absl::StrCat("job ", cancel.job_id(), " rank ", cancel.rank(),
                                               " run ", cancel.attempt() + 1,
                                               " never started on this agent (its assignment "
                                               "did not arrive)")));
    }
    WakeWriter();
    return;
  }
  RT_LOG(Info) << "cancelling job " << cancel.job_id() << " rank " << rank.rank << " ("
               << cancel.reason() << ")";
  rank_.Cancel(options_.cancel_grace, cancel.job_id());
}

void Agent::HandleHeal(const v1::Heal& heal) {
  const RankSlot::Info rank = rank_.info();
  std::string work_dir;
  {
    absl::MutexLock lock(&mu_);
    work_dir = rank_work_dir_;
  }
  if (!rank.active || rank.job_id != heal.job_id() || rank.rank != heal.rank() ||
      rank.attempt != heal.attempt() || work_dir.empty()) {
    RT_LOG(Info) << "heal for job " << heal.job_id() << " rank " << heal.rank()
                 << ": it does not run here (any more); ignored";
    return;
  }
  HealInstruction instruction;
  instruction.generation = heal.generation();
  instruction.master_addr = heal.master_addr();
  instruction.master_port = heal.master_port();
  if (absl::Status s = WriteHealInstruction(ControlFilePath(work_dir), instruction); !s.ok()) {
    RT_LOG(Error) << s;  // the trainer gives up waiting and exits 3: the job restarts from storage
    return;
  }
  RT_LOG(Info) << "job " << heal.job_id() << " rank " << heal.rank()
               << " heals in place: rejoin as "
               << "generation " << heal.generation() << " at " << heal.master_addr() << ":"
               << heal.master_port();
}

void Agent::HandleStepRecordsRequest(const v1::StepRecordsRequest& request) {
  // Rare (a finished job whose store lacks steps) and one sequential read of one file.
  std::vector<v1::AgentMessage> answer = AnswerStepRecords(options_.work_dir, request);
  int64_t records = 0;
  for (const v1::AgentMessage& m : answer) records += m.step_records().record_json_size();
  RT_LOG(Info) << "the coordinator asked for steps " << request.first_step() << "-"
               << request.last_step() << " of " << request.job_id() << " rank " << request.rank()
               << ": sending " << records << " records from this work dir";
  absl::MutexLock lock(&mu_);
  for (v1::AgentMessage& m : answer) replies_.push_back(std::move(m));
  writer_wakeup_ = true;
}

void Agent::OrphanRank() {
  // The orphan's records and exit are dropped from now on (a new epoch).
  if (const size_t dropped = outbox_.DropAll(); dropped > 0) {
    RT_LOG(Warning) << "dropping " << dropped << " unsent messages of worker " << worker_id();
  }
  if (const RankSlot::Info rank = rank_.info(); rank.active) {
    RT_LOG(Warning) << "cancelling job " << rank.job_id << " rank " << rank.rank
                    << ": no coordinator will collect it";
    rank_.Cancel(options_.cancel_grace);
    rank_.AwaitEnd(absl::FromChrono(options_.cancel_grace) + absl::Seconds(5));
  }
  rank_.Release();
}

}  // namespace ringtrain
