// The job half of Cluster: scheduling, starting ranks, state transitions, and how rank
// exits and lost workers end a run. The RPC entry points are in cluster.cc; what a failed run leads
// to (restarts) and re-adoption after a coordinator restart in cluster_restarts.cc.
#include "coordinator/cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/printable.h"
#include "common/trainer_exit.h"
#include "coordinator/proto_convert.h"
#include "coordinator/restart_policy.h"

namespace ringtrain {
namespace {

void LogIfError(const absl::Status& status) {
  if (!status.ok()) {
    RT_LOG(Error) << "job store: " << status;
  }
}

// Whether this process can judge `host`'s ports by binding them itself.
bool IsLocalHost(const std::string& host) {
  return host == "localhost" || absl::StartsWith(host, "127.") || host == "::1";
}

// Binds and releases `port` on 127.0.0.1: true when nothing listens there now.
bool LocalPortIsFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return true;  // cannot tell; let the rendezvous report a clash
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return free;
}

// Whether the rank's agent ended it before a trainer ran: its reason is the exit's stderr tail.
bool AgentEnded(const v1::RankExit& exit) {
  return exit.signal() == 0 &&
         (exit.exit_status() == kAgentExitBusy || exit.exit_status() == kAgentExitRefused ||
          exit.exit_status() == kAgentExitStartFailed);
}

// How the rank ended, as the job's error says it: the agent's own reason when no trainer ran (not
// its code, which would read like the trainer's), else the trainer's status or signal.
std::string DescribeExit(const v1::RankExit& exit) {
  if (exit.signal() != 0) return absl::StrCat("was killed by signal ", exit.signal());
  const std::string reason = ValidUtf8(exit.stderr_tail());
  switch (exit.exit_status()) {
    case kAgentExitRefused:
      return absl::StrCat("was refused by its agent before a trainer started: ", reason);
    case kAgentExitBusy:
    case kAgentExitStartFailed: return absl::StrCat("could not be started by its agent: ", reason);
    default: return absl::StrCat("exited with status ", exit.exit_status());
  }
}

}  // namespace

void Cluster::SetWaitReasonLocked(const std::string& job_id, const std::string& reason) {
  std::string& known = wait_reasons_[job_id];
  if (known == reason) return;
  known = reason;
  absl::StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (!job.ok()) return;
  job->wait_reason = reason;
  LogIfError(store_->UpdateJob(*job));
  auto running = running_.find(job_id);
  if (running != running_.end()) running->second.record.wait_reason = reason;
}

void Cluster::ScheduleLocked() {
  const absl::Time now = options_.clock->Now();
  // Restarting jobs go first: they were running, and their checkpoint is the newest work.
  std::vector<PendingJob> queue = RestartingJobsLocked(now);
  std::set<std::string> restarting;
  for (const PendingJob& p : queue) restarting.insert(p.job_id);
  queue.insert(queue.end(), queue_.begin(), queue_.end());
  if (queue.empty()) {
    FailUnschedulableLocked({}, now);
    return;
  }
  ScheduleDecision decision = Schedule(queue, workers_.Schedulable());
  for (const auto& [job_id, mesh] : decision.start) StartJobLocked(job_id, mesh);
  for (const auto& [job_id, reason] : decision.waiting) {
    if (restarting.count(job_id) == 0) {
      SetWaitReasonLocked(job_id, reason);
    } else {
      SetWaitReasonLocked(
          job_id, absl::StrCat(RestartPolicy::Ordinal(running_.at(job_id).record), ": ", reason));
    }
  }
  FailUnschedulableLocked(decision.unfit, now);
}

absl::StatusOr<int> Cluster::PickRendezvousPortLocked(const std::string& host) {
  std::set<int> taken;
  for (const auto& [id, job] : running_) taken.insert(job.run.master_port);
  const int span = options_.rendezvous_port_last - options_.rendezvous_port_first + 1;
  for (int i = 0; i < span; ++i) {
    const int port = next_port_;
    next_port_ = port == options_.rendezvous_port_last ? options_.rendezvous_port_first : port + 1;
    if (taken.count(port) != 0) continue;
    if (IsLocalHost(host) && !LocalPortIsFree(port)) continue;
    return port;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("no free rendezvous port in ", options_.rendezvous_port_first, "-",
                   options_.rendezvous_port_last, " on ", host, " (--rendezvous-ports)"));
}

v1::CoordinatorMessage Cluster::AssignmentMessage(const RunningJob& job,
                                                  const RankPlacement& placement,
                                                  const Worker& worker) const {
  const JobRecord& r = job.record;
  v1::CoordinatorMessage message;
  v1::Assignment* a = message.mutable_assignment();
  a->set_job_id(r.job_id);
  a->set_rank(placement.rank);
  a->set_world_size(r.degrees.world);
  a->set_master_addr(job.run.master_addr);
  a->set_master_port(job.run.master_port);
  a->set_config_toml(r.config_toml);
  for (const std::string& o : r.overrides) a->add_overrides(o);
  for (const std::string& o : r.mesh_overrides) a->add_overrides(o);
  if (r.load_from) {
    v1::CheckpointLoad* load = a->mutable_load();
    load->set_job_id(r.load_from->job_id);
    load->set_folder(r.load_from->folder);
    load->set_step(r.load_from->step);
    load->set_model_only(r.load_from->model_only);
  }
  a->set_device(worker.device);
  a->set_attempt(r.restart_count);
  return message;
}

void Cluster::StartJobLocked(const std::string& job_id, const std::vector<RankPlacement>& mesh) {
  auto existing = running_.find(job_id);
  const bool restart =
      existing != running_.end() && existing->second.record.state == JobState::kRestarting;
  if (!restart) DequeueLocked(job_id);
  wait_reasons_.erase(job_id);
  unfit_since_.erase(job_id);
  absl::StatusOr<JobRecord> job = store_->GetJob(job_id);
  if (!job.ok()) {
    RT_LOG(Error) << "cannot start " << job_id << ": " << job.status();
    return;
  }
  const Worker& host = *workers_.Find(mesh.front().worker_id);
  absl::StatusOr<int> port = PickRendezvousPortLocked(host.info.address);
  if (!port.ok()) {
    JobError error{-1,
                   "",
                   0,
                   "",
                   std::string(port.status().message()),
                   kCauseNoPort,
                   job->last_step,
                   absl::ToUnixMillis(options_.clock->Now())};
    job->failures.push_back(error);
    job->error = error;
    (void)store_->UpdateJob(*job);
    TransitionLocked(job_id, JobState::kFailed, job->error->message);
    MaybeRetireLocked(job_id);
    return;
  }
  std::string elastic;  // what an elastic restart changed, for the event stream
  if (restart) {
    ++job->restart_count;
    std::optional<ElasticMesh>& planned = existing->second.restart_mesh;
    if (planned) {
      job->mesh_overrides = planned->overrides;
      job->degrees = planned->degrees;
      elastic = planned->description;
      planned.reset();
    }
  }
  job->mesh = mesh;
  job->wait_reason.clear();
  LogIfError(store_->UpdateJob(*job));
  std::vector<std::string> where;
  for (const RankPlacement& p : mesh) where.push_back(absl::StrCat(p.rank, "→", p.worker_id));
  std::string message = absl::StrCat("ranks ", absl::StrJoin(where, " "), "; rendezvous at ",
                                     host.info.address, ":", *port);
  if (restart) {
    message = absl::StrCat("run ", job->restart_count + 1, " (restart ", job->restart_count, " of ",
                           job->restart.max_restarts, ", from the latest checkpoint): ", message,
                           elastic.empty() ? "" : "; ", elastic);
  }
  if (!TransitionLocked(job_id, JobState::kAssigned, message)) return;
  job->state = JobState::kAssigned;

  RunningJob& running = running_[job_id];
  running.record = *job;
  running.run = JobRun{};  // a new run: nothing of the failed one carries over
  running.run.attempt = job->restart_count;
  running.run.mesh = mesh;
  running.run.master_addr = host.info.address;
  running.run.master_port = *port;
  running.run.assigned_at = options_.clock->Now();
  running.symptom.reset();
  running.awaiting_resume = restart;
  running.snapshot_step = 0;
  running.snapshot_buddy_offset = 0;
  running.healing_failure.reset();
  running.missing_steps.clear();
  for (const RankPlacement& p : mesh) {
    Worker& w = *workers_.Find(p.worker_id);
    w.Assign(job_id, p.rank, job->restart_count);
    w.channel->Send(AssignmentMessage(running, p, w));
  }
  RT_LOG(Info) << job_id << " assigned: " << message;
}

bool Cluster::TransitionLocked(const std::string& job_id, JobState to, const std::string& message) {
  absl::StatusOr<StateChange> change = store_->TransitionJob(job_id, to, message);
  if (!change.ok()) {
    RT_LOG(Error) << "job " << job_id << ": " << change.status();
    return false;
  }
  auto running = running_.find(job_id);
  if (running != running_.end()) running->second.record.state = to;
  if (IsTerminal(to)) ++tallies_.finished_jobs[absl::AsciiStrToLower(JobStateName(to))];
  hub_->Publish(job_id, ToProtoEvent(*change));
  RT_LOG(Info) << job_id << " " << JobStateName(change->from) << " -> " << JobStateName(to)
               << (message.empty() ? "" : ": ") << message;
  return true;
}

void Cluster::CancelRanksLocked(const RunningJob& job, const std::string& reason) {
  for (const RankPlacement& p : job.run.mesh) {
    if (job.run.exited.count(p.rank) != 0) continue;
    Worker* const w = workers_.Find(p.worker_id);  // after a restart, it may not be back yet
    if (w == nullptr || w->channel == nullptr ||
        !w->OwnsRank(job.record.job_id, p.rank, job.run.attempt)) {
      continue;
    }
    v1::CoordinatorMessage message;
    v1::Cancel* cancel = message.mutable_cancel();
    cancel->set_job_id(job.record.job_id);
    cancel->set_reason(reason);
    cancel->set_rank(p.rank);
    cancel->set_attempt(w->attempt);
    w->channel->Send(message);
  }
}

void Cluster::OnRankStartedLocked(Worker& worker, const v1::RankStarted& started) {
  auto it = running_.find(started.job_id());
  if (it == running_.end()) return;
  RunningJob& job = it->second;
  job.run.started.insert(started.rank());
  RT_LOG(Info) << started.job_id() << " rank " << started.rank() << " started on "
               << worker.info.worker_id << " (pid " << started.pid() << ")";
  MaybeMarkRunningLocked(started.job_id(), job);
}

void Cluster::MaybeMarkRunningLocked(const std::string& job_id, const RunningJob& job) {
  if (job.record.state == JobState::kAssigned && job.run.AllStarted()) {
    TransitionLocked(job_id, JobState::kRunning, "every rank started");
  }
}

void Cluster::OnRankExitLocked(Worker& worker, const v1::RankExit& exit) {
  // OnAgentMessage has checked that the worker runs this rank: it is free again.
  worker.Release();
  auto it = running_.find(exit.job_id());
  if (it == running_.end()) return;
  RunningJob& job = it->second;
  if (job.run.HasRank(exit.rank()) &&
      job.run.mesh[size_t(exit.rank())].worker_id != worker.info.worker_id) {
    // A trainer whose rank was healed onto another worker (a hung one, stopped): not the run's.
    RT_LOG(Info) << exit.job_id() << " rank " << exit.rank() << " on " << worker.info.worker_id
                 << ", replaced by a heal, " << DescribeExit(exit);
    ScheduleLocked();
    return;
  }
  job.run.exited.insert(exit.rank());
  const bool ok = exit.exit_status() == 0 && exit.signal() == 0;
  RT_LOG(Info) << exit.job_id() << " rank " << exit.rank() << " on " << worker.info.worker_id << " "
               << DescribeExit(exit);
  const bool live =
      job.record.state == JobState::kAssigned || job.record.state == JobState::kRunning;
  if (ok) {
    job.run.exited_ok.insert(exit.rank());
    if (job.run.AllExitedOk() && live) {
      if (job.record.state == JobState::kAssigned) {
        TransitionLocked(exit.job_id(), JobState::kRunning, "every rank started");
      }
      FinishRunLocked(exit.job_id(), job);
    }
  } else if (live) {
    JobError error;
    error.rank = exit.rank();
    error.worker_id = worker.info.worker_id;
    error.exit_status = exit.signal() != 0 ? 128 + exit.signal() : exit.exit_status();
    if (!AgentEnded(exit)) error.stderr_tail = ValidUtf8(exit.stderr_tail());  // else in message
    error.cause = exit.signal() == 0 && exit.exit_status() == kAgentExitRefused ? kCauseRankRefused
                                                                                : kCauseRankExit;
    error.message = absl::StrCat("rank ", exit.rank(), " on ", worker.info.worker_id, " (",
                                 worker.info.host_label, ") ", DescribeExit(exit));
    if (exit.signal() == 0 && exit.exit_status() == kTrainerExitPeerLost) {
      RunSymptomLocked(exit.job_id(), std::move(error));
    } else {
      RunFailedLocked(exit.job_id(), std::move(error));
    }
  }
  MaybeRetireLocked(exit.job_id());
  ScheduleLocked();
}

void Cluster::LoseWorkerLocked(Worker& worker, const std::string& why) {
  const std::string job_id = worker.job_id;
  const int rank = worker.rank;
  const int attempt = worker.attempt;
  worker.MarkLost(options_.clock->Now(), why);
  RT_LOG(Warning) << worker.info.worker_id << " lost: " << why;
  auto it = running_.find(job_id);
  if (job_id.empty() || it == running_.end() || it->second.run.attempt != attempt) return;
  if (it->second.run.HasRank(rank) &&
      it->second.run.mesh[size_t(rank)].worker_id != worker.info.worker_id) {
    return;  // its rank was healed onto another worker
  }
  it->second.run.exited.insert(rank);  // nobody will report it
  JobError error;
  error.rank = rank;
  error.worker_id = worker.info.worker_id;
  error.exit_status = -1;
  error.cause = kCauseWorkerLost;
  error.message = absl::StrCat("worker ", worker.info.worker_id, " (", worker.info.host_label,
                               ") running rank ", rank, " was lost: ", why);
  RunFailedLocked(job_id, std::move(error));
  MaybeRetireLocked(job_id);
}

void Cluster::MaybeRetireLocked(const std::string& job_id) {
  auto it = running_.find(job_id);
  if (it == running_.end()) return;
  const RunningJob& job = it->second;
  if (!IsTerminal(job.record.state)) return;
  if (!job.run.AllExited()) return;
  running_.erase(it);
}

}  // namespace ringtrain
