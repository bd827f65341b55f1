// The trainer side of the Agent: assignments, cancels, the running rank's callbacks, and giving
// up a rank whose registration the coordinator has forgotten. (The session side is agent.cc.)
#include "worker/agent/agent.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace {

constexpr int kExitBusy = 125;
constexpr int kExitStartFailed = 127;

// Job ids name a folder under the work dir: no separators, no "..".
absl::Status CheckJobId(const std::string& job_id) {
  const bool safe = !job_id.empty() && job_id != "." && job_id != ".." &&
                    std::all_of(job_id.begin(), job_id.end(), [](char c) {
                      return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
                             c == '_' || c == '.';
                    });
  if (safe) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "job id '", job_id, "' cannot name a folder; expected letters, digits, '-', '_' or '.'"));
}

// Writes the assignment's config to <work_dir>/<job_id>/rank-<rank>/config.toml and describes the
// trainer to start for it.
absl::StatusOr<RankLaunch> PrepareLaunch(const AgentOptions& options, const v1::Assignment& a) {
  RT_RETURN_IF_ERROR(CheckJobId(a.job_id()));
  RankLaunch launch;
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
  launch.rank = a.rank();
  launch.world_size = a.world_size();
  launch.master_addr = a.master_addr();
  launch.master_port = a.master_port();
  launch.host_address = options.advertise_address;
  launch.device = options.device;
  launch.threads = options.threads;
  return launch;
}

v1::AgentMessage ExitMessage(const std::string& job_id, int rank, int exit_status, int signal,
                             const std::string& stderr_tail) {
  v1::AgentMessage message;
  v1::RankExit* exit = message.mutable_rank_exit();
  exit->set_job_id(job_id);
  exit->set_rank(rank);
  exit->set_exit_status(exit_status);
  exit->set_signal(signal);
  exit->set_stderr_tail(stderr_tail);
  return message;
}

}  // namespace

void Agent::AwaitRankEnd(absl::Duration timeout) {
  if (!mu_.AwaitWithTimeout(absl::Condition(this, &Agent::RankIdle), timeout)) {
    RT_LOG(Error) << "trainer of job " << rank_job_id_ << " rank " << rank_
                  << " has not ended; leaving it";
  }
}

void Agent::HandleAssignment(const v1::Assignment& a) {
  RT_LOG(Info) << "assignment: job " << a.job_id() << " rank " << a.rank() << " of "
               << a.world_size() << ", rendezvous " << a.master_addr() << ":" << a.master_port();
  if (!a.device().empty() && a.device() != options_.device) {
    RT_LOG(Warning) << "the assignment names device " << a.device() << "; this agent runs "
                    << options_.device;
  }
  std::unique_ptr<RankSupervisor> finished;
  {
    absl::MutexLock lock(&mu_);
    if (rank_active_ && rank_job_id_ == a.job_id() && rank_ == a.rank()) {
      RT_LOG(Warning) << "job " << a.job_id() << " rank " << a.rank()
                      << " is already running here; ignoring the repeated assignment";
      return;
    }
    if (rank_active_ || stop_requested_) {
      const std::string why = stop_requested_
                                  ? absl::StrCat("agent ", worker_id_, " is shutting down")
                                  : absl::StrCat("agent ", worker_id_, " is busy with job ",
                                                 rank_job_id_, " rank ", rank_);
      RT_LOG(Warning) << "refusing job " << a.job_id() << " rank " << a.rank() << ": " << why;
      Enqueue(epoch_, ExitMessage(a.job_id(), a.rank(), kExitBusy, 0, why));
      return;
    }
    finished = std::move(supervisor_);
  }
  finished.reset();  // outside mu_: joins its monitor thread, whose on_exit took mu_

  // Assignments arrive on this thread only, so no other rank can start in between.
  absl::StatusOr<RankLaunch> launch = PrepareLaunch(options_, a);
  absl::MutexLock lock(&mu_);
  absl::Status started = launch.status();
  if (started.ok()) started = StartRank(*launch, a.job_id(), epoch_);
  if (!started.ok()) {
    RT_LOG(Error) << "cannot start job " << a.job_id() << " rank " << a.rank() << ": " << started;
    Enqueue(epoch_,
            ExitMessage(a.job_id(), a.rank(), kExitStartFailed, 0, std::string(started.message())));
  }
}

absl::Status Agent::StartRank(const RankLaunch& launch, const std::string& job_id, uint64_t epoch) {
  const int rank = launch.rank;
  RankSupervisor::Callbacks callbacks;
  callbacks.on_record = [this, epoch, job_id, rank](const std::string& line) {
    metrics_->TrainerRecord(line);
    // Every rank writes the same record; rank 0's reaches the coordinator, the others stay here.
    if (rank != 0) return;
    v1::AgentMessage message;
    v1::RankReport* report = message.mutable_rank_report();
    report->set_job_id(job_id);
    report->set_rank(rank);
    report->set_record_json(line);
    absl::MutexLock lock(&mu_);
    Enqueue(epoch, std::move(message));
  };
  callbacks.on_exit = [this, epoch, job_id, rank](const RankExit& e) {
    metrics_->TrainerExited(e.signal == 0 && e.exit_status == 0);
    RT_LOG(Info) << "rank exited: job " << job_id << " rank " << rank
                 << (e.signal != 0 ? absl::StrCat(", killed by signal ", e.signal)
                                   : absl::StrCat(", exit status ", e.exit_status));
    absl::MutexLock lock(&mu_);
    v1::AgentMessage exit_message =
        ExitMessage(job_id, rank, e.signal != 0 ? 0 : e.exit_status, e.signal, e.stderr_tail);
    if (epoch == epoch_) last_exit_ = exit_message;
    Enqueue(epoch, std::move(exit_message));
    rank_active_ = false;
  };
  // mu_ is held, so the first record queues only after RankStarted below.
  metrics_->TrainerStarted(job_id, rank, launch.world_size);
  RT_ASSIGN_OR_RETURN(supervisor_, RankSupervisor::Start(launch, std::move(callbacks)));
  rank_active_ = true;
  rank_job_id_ = job_id;
  rank_ = rank;
  rank_dir_ = launch.work_dir;
  v1::AgentMessage message;
  v1::RankStarted* started = message.mutable_rank_started();
  started->set_job_id(job_id);
  started->set_rank(rank);
  started->set_pid(supervisor_->pid());
  Enqueue(epoch, std::move(message));
  RT_LOG(Info) << "rank started: job " << job_id << " rank " << rank << ", pid "
               << supervisor_->pid() << ", in " << launch.work_dir;
  return absl::OkStatus();
}

void Agent::HandleCancel(const v1::Cancel& cancel) {
  absl::MutexLock lock(&mu_);
  if (!rank_active_ || rank_job_id_ != cancel.job_id()) {
    RT_LOG(Info) << "cancel for job " << cancel.job_id() << ": no rank of it runs here";
    return;
  }
  RT_LOG(Info) << "cancelling job " << cancel.job_id() << " rank " << rank_ << " ("
               << cancel.reason() << ")";
  supervisor_->Cancel(options_.cancel_grace);
}

void Agent::OrphanRank() {
  std::unique_ptr<RankSupervisor> orphan;
  {
    absl::MutexLock lock(&mu_);
    ++epoch_;  // the orphan's records and exit are dropped from now on
    if (!outbox_.empty()) {
      RT_LOG(Warning) << "dropping " << outbox_.size() << " unsent messages of worker "
                      << worker_id_;
    }
    outbox_.clear();
    if (rank_active_) {
      RT_LOG(Warning) << "cancelling job " << rank_job_id_ << " rank " << rank_
                      << ": no coordinator will collect it";
      supervisor_->Cancel(options_.cancel_grace);
      AwaitRankEnd(absl::FromChrono(options_.cancel_grace) + absl::Seconds(5));
    }
    orphan = std::move(supervisor_);
  }
  orphan.reset();  // outside mu_: its on_exit takes mu_
}

void Agent::ResendRecordsLocked() {
  std::ifstream in(rank_dir_ + "/metrics.jsonl");
  std::deque<v1::AgentMessage> records;
  // Only rank 0's records go upstream.
  for (std::string line; rank_ == 0 && std::getline(in, line);) {
    if (line.empty() || in.eof()) continue;  // the last line may still be being written
    v1::AgentMessage message;
    v1::RankReport* report = message.mutable_rank_report();
    report->set_job_id(rank_job_id_);
    report->set_rank(rank_);
    report->set_record_json(line);
    records.push_back(std::move(message));
  }
  if (!records.empty()) {
    RT_LOG(Info) << "re-sending " << records.size() << " step records of job " << rank_job_id_
                 << " (the coordinator keeps each step once)";
  }
  outbox_.insert(outbox_.begin(), records.begin(), records.end());
  // An exit written while the old coordinator shut down may never have been read: send it again
  // unless it is still queued (the coordinator takes a repeated exit once).
  if (!rank_active_ && last_exit_.has_value()) {
    const bool queued = std::any_of(outbox_.begin(), outbox_.end(),
                                    [](const v1::AgentMessage& m) { return m.has_rank_exit(); });
    if (!queued) outbox_.push_back(*last_exit_);
  }
}

}  // namespace ringtrain
