#include "client/job_steps.h"

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/job_format.h"

namespace ringtrain {
namespace {

// Cancels a stream when no Touch() has come for `timeout`, so a read of history cannot hang on a
// silent coordinator (the WatchJob stream itself has no deadline). Thread-safe.
class IdleWatchdog {
 public:
  IdleWatchdog(JobEventStream* stream, absl::Duration timeout)
      : stream_(stream), timeout_(timeout), thread_([this] { Run(); }) {}
  ~IdleWatchdog() {
    {
      absl::MutexLock lock(&mu_);
      stopped_ = true;
    }
    thread_.join();
  }
  void Touch() {
    absl::MutexLock lock(&mu_);
    last_event_ = absl::Now();
  }
  bool fired() {
    absl::MutexLock lock(&mu_);
    return fired_;
  }

 private:
  void Run() {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithDeadline(absl::Condition(&stopped_), last_event_ + timeout_)) {
      if (absl::Now() < last_event_ + timeout_) continue;  // an event came meanwhile
      fired_ = true;
      stream_->Cancel();
      return;
    }
  }

  JobEventStream* const stream_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::Time last_event_ ABSL_GUARDED_BY(mu_) = absl::Now();
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is initialised
};

}  // namespace

absl::StatusOr<JobSteps> FetchJobSteps(CoordinatorClient& client, const std::string& job_id,
                                       int64_t from_step, std::chrono::milliseconds idle_timeout) {
  absl::StatusOr<v1::Job> job = client.GetJob(job_id);
  if (!job.ok()) return job.status();
  const bool finished = IsTerminal(job->state());
  const int64_t until = job->last_step();  // for an unfinished job: where "so far" ends
  const int64_t first = std::max<int64_t>(from_step, 1);

  std::map<int64_t, v1::StepEvent> by_step;  // a step replayed keeps its last event
  if (finished || until >= first) {
    std::unique_ptr<JobEventStream> stream = client.WatchJob(job_id, from_step);
    bool caught_up = false;
    bool idle = false;
    {
      IdleWatchdog watchdog(stream.get(), absl::FromChrono(idle_timeout));
      v1::JobEvent event;
      while (stream->Next(&event)) {
        watchdog.Touch();
        if (!event.has_step() || event.step().step() < first) continue;
        by_step[event.step().step()] = event.step();
        if (!finished && event.step().step() >= until) {
          caught_up = true;  // the rest would be live
          break;
        }
      }
      idle = watchdog.fired();
    }
    if (caught_up) stream->Cancel();
    const absl::Status status = stream->Finish();
    if (idle && !caught_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("no event from the coordinator at ", client.address(), " for ",
                       absl::FormatDuration(absl::FromChrono(idle_timeout)),
                       " while reading the steps of ", job_id, " (", by_step.size(),
                       " read, up to step ", by_step.empty() ? 0 : by_step.rbegin()->first, ")"));
    }
    if (!caught_up && !status.ok()) return status;
  }
  JobSteps out;
  out.job = *std::move(job);
  out.steps.reserve(by_step.size());
  for (auto& [step, event] : by_step) out.steps.push_back(std::move(event));
  return out;
}

std::string StepRecordLine(const v1::StepEvent& event) {
  std::string record(absl::StripAsciiWhitespace(event.record_json()));
  if (!record.empty() && record.find('\n') == std::string::npos) return record;
  return nlohmann::json{{"step", event.step()}, {"loss", event.loss()}}.dump();
}

}  // namespace ringtrain
