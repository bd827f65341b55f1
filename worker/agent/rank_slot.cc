#include "worker/agent/rank_slot.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace {

v1::AgentMessage ReportMessage(const std::string& job_id, int rank, int attempt,
                               const std::string& line) {
  v1::AgentMessage message;
  v1::RankReport* report = message.mutable_rank_report();
  report->set_job_id(job_id);
  report->set_rank(rank);
  report->set_attempt(attempt);
  report->set_record_json(line);
  return message;
}

}  // namespace

v1::AgentMessage RankExitMessage(const std::string& job_id, int rank, int attempt, int exit_status,
                                 int signal, const std::string& stderr_tail) {
  v1::AgentMessage message;
  v1::RankExit* exit = message.mutable_rank_exit();
  exit->set_job_id(job_id);
  exit->set_rank(rank);
  exit->set_attempt(attempt);
  exit->set_exit_status(exit_status);
  exit->set_signal(signal);
  exit->set_stderr_tail(stderr_tail);
  return message;
}

RankSlot::RankSlot(Outbox* outbox, AgentMetrics* metrics, std::function<void()> on_change)
    : outbox_(outbox), metrics_(metrics), on_change_(std::move(on_change)) {}

RankSlot::~RankSlot() { Release(); }

RankSlot::Info RankSlot::info() const {
  absl::MutexLock lock(&mu_);
  return Info{active_, job_id_, rank_, attempt_, active_ && stopping_};
}

bool RankSlot::active() const {
  absl::MutexLock lock(&mu_);
  return active_;
}

absl::Status RankSlot::Start(const RankLaunch& launch, const std::string& job_id, int attempt) {
  std::unique_ptr<RankSupervisor> previous;  // destroyed last, outside mu_
  {
    absl::MutexLock lock(&mu_);
    if (active_) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id_, " rank ", rank_, " is still running"));
    }
    previous = std::move(supervisor_);
    const uint64_t epoch = outbox_->epoch();
    const int rank = launch.rank;
    RankSupervisor::Callbacks callbacks;
    callbacks.on_record = [this, epoch, job_id, rank, attempt](const std::string& line) {
      metrics_->TrainerRecord(line);
      // Every rank writes the same record; rank 0's reaches the coordinator, the others stay here.
      if (rank != 0) return;
      {
        // Taking mu_ orders the first record after RankStarted, which Start queues holding it.
        absl::MutexLock lock(&mu_);
        outbox_->Push(epoch, ReportMessage(job_id, rank, attempt, line));
      }
      on_change_();
    };
    callbacks.on_hung = [this, epoch, job_id, rank, attempt](const std::string& reason) {
      RT_LOG(Warning) << "job " << job_id << " rank " << rank << " is hung: " << reason;
      v1::AgentMessage message;
      v1::RankHung* hung = message.mutable_rank_hung();
      hung->set_job_id(job_id);
      hung->set_rank(rank);
      hung->set_attempt(attempt);
      hung->set_reason(reason);
      {
        absl::MutexLock lock(&mu_);  // after the rank's records, before its exit
        outbox_->Push(epoch, std::move(message));
      }
      on_change_();
    };
    callbacks.on_exit = [this, epoch, job_id, rank, attempt](const RankExit& e) {
      metrics_->TrainerExited(e.signal == 0 && e.exit_status == 0);
      RT_LOG(Info) << "rank exited: job " << job_id << " rank " << rank
                   << (e.signal != 0 ? absl::StrCat(", killed by signal ", e.signal)
                                     : absl::StrCat(", exit status ", e.exit_status));
      {
        absl::MutexLock lock(&mu_);
        v1::AgentMessage exit_message = RankExitMessage(
            job_id, rank, attempt, e.signal != 0 ? 0 : e.exit_status, e.signal, e.stderr_tail);
        // A RankExit is dropped only for a stale epoch: then there is nothing to send again.
        if (outbox_->Push(epoch, exit_message)) last_exit_ = std::move(exit_message);
        active_ = false;  // after the exit is queued (see the header)
      }
      on_change_();
    };
    metrics_->TrainerStarted(job_id, rank, launch.world_size);
    RT_ASSIGN_OR_RETURN(supervisor_, RankSupervisor::Start(launch, std::move(callbacks)));
    active_ = true;
    stopping_ = false;
    job_id_ = job_id;
    rank_ = rank;
    attempt_ = attempt;
    last_exit_.reset();
    v1::AgentMessage message;
    v1::RankStarted* started = message.mutable_rank_started();
    started->set_job_id(job_id);
    started->set_rank(rank);
    started->set_attempt(attempt);
    started->set_pid(supervisor_->pid());
    outbox_->Push(epoch, std::move(message));
    RT_LOG(Info) << "rank started: job " << job_id << " rank " << rank << ", pid "
                 << supervisor_->pid() << ", in " << launch.work_dir;
  }
  return absl::OkStatus();
}

bool RankSlot::Cancel(std::chrono::milliseconds grace, absl::string_view job_id) {
  absl::MutexLock lock(&mu_);
  if (!active_ || (!job_id.empty() && job_id != job_id_)) return false;
  // Released (orphaned, or left running after AwaitEnd timed out): nothing here to signal.
  if (supervisor_ == nullptr) return false;
  supervisor_->Cancel(grace);
  stopping_ = true;
  return true;
}

bool RankSlot::AwaitEnd(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (mu_.AwaitWithTimeout(absl::Condition(this, &RankSlot::Ended), timeout)) return true;
  RT_LOG(Error) << "trainer of job " << job_id_ << " rank " << rank_
                << " has not ended; leaving it";
  return false;
}

bool RankSlot::RequeueExit(const std::string& job_id, int rank, int attempt) {
  absl::MutexLock lock(&mu_);
  if (active_ || job_id_ != job_id || rank_ != rank || attempt_ != attempt) return false;
  // Holding mu_, no exit can be queued meanwhile: the check and the push are one step.
  if (last_exit_.has_value() && !outbox_->HasRankExit()) outbox_->Push(*last_exit_);
  return true;
}

void RankSlot::Release() {
  std::unique_ptr<RankSupervisor> supervisor;
  {
    absl::MutexLock lock(&mu_);
    supervisor = std::move(supervisor_);
  }
  supervisor.reset();  // outside mu_: its on_exit takes mu_
}

}  // namespace ringtrain
