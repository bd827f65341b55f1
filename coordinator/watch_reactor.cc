#include "coordinator/watch_reactor.h"

#include <utility>
#include <vector>

#include "common/grpc/client_util.h"
#include "common/log.h"
#include "coordinator/proto_convert.h"

namespace ringtrain {
namespace {

bool IsFinalState(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

bool IsFinalEvent(const v1::JobEvent& event) {
  return event.has_state_change() && IsFinalState(event.state_change().to_state());
}

}  // namespace

WatchReactor::WatchReactor(JobStore* store, EventHub* hub, RpcCounter* rpcs, Executor* loader,
                           std::string job_id, int64_t from_step)
    : store_(store),
      hub_(hub),
      rpcs_(rpcs),
      loader_(loader),
      job_id_(std::move(job_id)),
      next_step_(std::max<int64_t>(from_step, 1)) {
  // Subscribe before the first store read: an event published meanwhile is both in the store and
  // in live_, and IsNew drops the second copy.
  hub_->Subscribe(job_id_, this);
  absl::MutexLock lock(&mu_);
  Pump();
}

void WatchReactor::OnJobEvent(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  if (finished_) return;
  if (live_.size() >= kLiveBufferEvents) {
    // Too slow a reader: forget the buffer and replay what it missed from the store.
    live_.clear();
    catching_up_ = true;
    dropped_live_ = true;
  } else {
    live_.push_back(event);
  }
  Pump();
}

bool WatchReactor::IsNew(const v1::JobEvent& event) const {
  if (event.has_step()) return event.step().step() >= next_step_;
  return event.state_change().seq() > last_state_seq_;
}

void WatchReactor::StartLoad() {
  loading_ = true;
  dropped_live_ = false;
  loader_->Schedule([this] { LoadReplayPage(); });
}

void WatchReactor::LoadReplayPage() {
  bool wanted = false;
  int64_t from_step = 0;
  {
    absl::MutexLock lock(&mu_);
    wanted = !finished_;
    from_step = next_step_;
  }
  absl::StatusOr<std::vector<StateChange>> changes = absl::CancelledError();
  absl::StatusOr<std::vector<StepEvent>> steps = absl::CancelledError();
  if (wanted) {  // the store is read without mu_: a reaction meanwhile never waits for it
    changes = store_->StateChanges(job_id_);
    steps = store_->StepEvents(job_id_, from_step, kReplayPageSteps);
  }
  bool delete_now = false;
  {
    absl::MutexLock lock(&mu_);
    loading_ = false;
    if (done_) {
      delete_now = true;  // OnDone ran during the read and left the reactor to this task
    } else if (!finished_) {
      if (!changes.ok() || !steps.ok()) {
        const absl::Status& bad = !changes.ok() ? changes.status() : steps.status();
        RT_LOG(Error) << "watch " << job_id_ << ": cannot read the job store: " << bad;
        FinishOnce(ToGrpcStatus(bad));
      } else if (!FillReplay(*changes, *steps) && !dropped_live_) {
        catching_up_ = false;  // the store has nothing new: follow live from here
      }  // (live events dropped during the read may be newer than it: read again)
      Pump();
    }
  }
  if (delete_now) delete this;
}

bool WatchReactor::FillReplay(const std::vector<StateChange>& changes,
                              const std::vector<StepEvent>& steps) {
  replay_.clear();
  // History order: state changes before the final one, the steps, then the final state change
  // (steps are only reported while the job runs, and the final change comes after the last step).
  std::vector<v1::JobEvent> finals;
  for (const StateChange& change : changes) {
    v1::JobEvent event = ToProtoEvent(change);
    if (!IsNew(event)) continue;
    if (IsFinalEvent(event)) {
      finals.push_back(std::move(event));
    } else {
      replay_.push_back(std::move(event));
    }
  }
  for (const StepEvent& step : steps) replay_.push_back(ToProtoEvent(step));
  const bool more_steps = static_cast<int64_t>(steps.size()) == kReplayPageSteps;
  if (!more_steps) {
    for (v1::JobEvent& event : finals) replay_.push_back(std::move(event));
  }
  return !replay_.empty();
}

void WatchReactor::Pump() {
  if (writing_ || finished_) return;
  if (final_sent_ || cancelled_) {
    FinishOnce(cancelled_ ? grpc::Status::CANCELLED : grpc::Status::OK);
    return;
  }
  if (loading_) return;  // the load pumps again when it ends
  while (true) {
    std::deque<v1::JobEvent>* source = nullptr;
    if (catching_up_) {
      if (replay_.empty()) {
        StartLoad();
        return;
      }
      source = &replay_;
    } else {
      if (live_.empty()) return;
      source = &live_;
    }
    v1::JobEvent event = std::move(source->front());
    source->pop_front();
    if (!IsNew(event)) continue;
    if (event.has_step()) {
      if (!catching_up_ && event.step().step() > next_step_) {
        // A gap in the live stream (cannot happen while events are published in step order, but
        // the store is the truth): fill it from there.
        live_.push_front(std::move(event));
        catching_up_ = true;
        continue;
      }
      next_step_ = event.step().step() + 1;
    } else {
      last_state_seq_ = event.state_change().seq();
      if (IsFinalEvent(event)) final_sent_ = true;
    }
    in_flight_ = std::move(event);
    writing_ = true;
    StartWrite(&in_flight_);
    return;
  }
}

void WatchReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) {
    // The client went away mid-write; OnCancel follows or has run.
    cancelled_ = true;
  }
  Pump();
}

void WatchReactor::OnCancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  Pump();
}

void WatchReactor::FinishOnce(const grpc::Status& status) {
  if (finished_) return;
  finished_ = true;
  live_.clear();
  replay_.clear();
  rpcs_->CountRpc("WatchJob", static_cast<absl::StatusCode>(status.error_code()));
  Finish(status);
}

void WatchReactor::OnDone() {
  hub_->Unsubscribe(job_id_, this);
  bool loading = false;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    loading = loading_;
  }
  if (!loading) delete this;  // else the load deletes it when it ends (LoadReplayPage)
}

}  // namespace ringtrain
