#include "client/watch.h"

#include <unistd.h>

#include <iostream>
#include <set>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/exit_codes.h"
#include "client/interrupt.h"

namespace ringtrain {
namespace {

// Errors that reconnecting cannot fix: the request itself is wrong.
bool Retryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kFailedPrecondition: return false;
    default: return true;
  }
}

using StateKey = std::tuple<int, int, int64_t, int32_t>;  // from, to, time

StateKey KeyOf(const v1::StateChange& c) {
  return {c.from_state(), c.to_state(), c.time().seconds(), c.time().nanos()};
}

}  // namespace

WatchPrinter::WatchPrinter(OutputFormat format, std::ostream* out, bool terminal, Steps steps)
    : format_(format), out_(out), terminal_(terminal), steps_(steps) {}

void WatchPrinter::OnState(const v1::StateChange& change) {
  if (format_ == OutputFormat::kJson) {
    *out_ << StateChangeJson(change) << std::endl;
    return;
  }
  EndLine();
  *out_ << StateChangeLine(change) << std::endl;
}

void WatchPrinter::OnStep(const v1::StepEvent& event) {
  ++steps_seen_;
  step_seconds_sum_ += event.step_seconds();
  const StragglerNote straggler = StragglerOf(event);
  const bool straggler_changed = straggler.rank != straggler_.rank;
  if (format_ == OutputFormat::kJson) {
    // The step's event carries its validation_loss (StepEventJson).
    *out_ << StepEventJson(event) << std::endl;
    if (straggler_changed) {
      *out_ << StragglerEventJson(event.job_id(), event.step(), straggler) << std::endl;
    }
    straggler_ = straggler;
    return;
  }
  if (straggler_changed) {
    EndLine();
    *out_ << StragglerLine(event.step(), straggler, straggler_) << std::endl;
  }
  straggler_ = straggler;
  const std::optional<double> validation = ValidationLossOf(event);
  if (validation) validation_ = ValidationPoint{event.step(), *validation};
  if (validation && (terminal_ || steps_ == Steps::kEveryStep)) {
    EndLine();
    *out_ << ValidationText(*validation_) << std::endl;
  }
  Progress progress;
  progress.step = event.step();
  progress.total_steps = total_steps_;
  progress.loss = event.loss();
  progress.tokens_per_second = event.tokens_per_second();
  progress.mean_step_seconds = step_seconds_sum_ / steps_seen_;
  progress.device_memory_peak_bytes = DeviceMemoryPeakBytes(event);
  progress.mfu_percent = MfuPercentOf(event);
  if (terminal_) {
    *out_ << "\r" << ProgressLine(progress) << "\x1b[K" << std::flush;  // rewrite, clear the rest
    live_line_ = true;
  } else if (steps_ == Steps::kEveryStep) {
    *out_ << ProgressLine(progress) << std::endl;
  }
}

void WatchPrinter::EndLine() {
  if (live_line_) *out_ << std::endl;
  live_line_ = false;
}

absl::StatusOr<v1::Job> FollowJob(CoordinatorClient& client, const std::string& job_id,
                                  const FollowOptions& options, WatchPrinter* printer) {
  absl::StatusOr<v1::Job> job = client.GetJob(job_id);
  if (!job.ok()) return job.status();
  if (printer) printer->set_total_steps(job->total_steps());

  std::set<StateKey> states_seen;
  int64_t last_step = options.from_step > 0 ? options.from_step - 1 : 0;
  bool resumed_past_start = false;  // a step has been seen: reconnect from the step after it
  int failures = 0;                 // broken streams in a row
  absl::Status last_error;
  for (;;) {
    std::unique_ptr<JobEventStream> stream =
        client.WatchJob(job_id, resumed_past_start ? last_step + 1 : options.from_step);
    v1::JobEvent event;
    while (stream->Next(&event)) {
      failures = 0;
      if (event.has_state_change()) {
        if (!states_seen.insert(KeyOf(event.state_change())).second) continue;
        if (printer) printer->OnState(event.state_change());
        if (options.on_state) options.on_state(event.state_change());
      } else if (event.has_step()) {
        if (event.step().step() <= last_step) continue;  // replayed after a reconnect
        last_step = event.step().step();
        resumed_past_start = true;
        if (printer) printer->OnStep(event.step());
        if (options.on_step) options.on_step(event.step());
      }
    }
    const absl::Status status = stream->Finish();
    if (!status.ok() && !Retryable(status)) {
      if (printer) printer->EndLine();
      return status;
    }
    if (status.ok()) {
      // The coordinator ends the stream when the job ends; make sure it has (it may also have been
      // shutting down).
      job = client.GetJob(job_id);
      if (job.ok() && IsTerminal(job->state())) {
        if (printer) printer->EndLine();
        return job;
      }
      last_error = job.ok() ? absl::UnavailableError(absl::StrCat("the watch of ", job_id,
                                                                  " ended while the job is ",
                                                                  JobStateName(job->state())))
                            : job.status();
    } else {
      last_error = status;
    }
    if (++failures > options.max_reconnects) break;
    // Reconnect: wait, then wait for the coordinator to answer (wait-for-ready, with a deadline).
    std::this_thread::sleep_for(options.first_backoff * (1 << (failures - 1)));
    CallOptions probe;
    probe.wait_for_ready = true;
    job = client.GetJob(job_id, probe);
    if (!job.ok() && !Retryable(job.status())) {
      if (printer) printer->EndLine();
      return job.status();
    }
  }
  if (printer) printer->EndLine();
  const bool unreachable = last_error.code() == absl::StatusCode::kUnavailable ||
                           last_error.code() == absl::StatusCode::kDeadlineExceeded;
  return absl::UnavailableError(
      absl::StrCat(unreachable ? "" : "the watch stream broke: ", last_error.message(),
                   " (gave up on ", job_id, " after ", options.max_reconnects,
                   " reconnection attempts; last step seen ", last_step, ")"));
}

int RunWatch(CoordinatorClient& client, const std::string& job_id, int64_t from_step,
             OutputFormat format, bool cancel_on_interrupt) {
  const FollowInterrupt interrupt(&client, job_id, cancel_on_interrupt);
  WatchPrinter printer(format, &std::cout, isatty(STDOUT_FILENO) == 1,
                       WatchPrinter::Steps::kEveryStep);
  FollowOptions options;
  options.from_step = from_step;
  const absl::StatusOr<v1::Job> job = FollowJob(client, job_id, options, &printer);
  if (!job.ok()) {
    std::cerr << CommandErrorLine("watch", job.status()) << std::endl;  // escaped
    return ExitCodeFor(job.status());
  }
  if (job->state() == v1::JOB_STATE_SUCCEEDED) {
    if (format == OutputFormat::kTable) {
      const std::optional<ValidationPoint>& validation = printer.validation();
      std::cout << job->job_id() << " SUCCEEDED at step " << job->last_step() << "/"
                << job->total_steps()
                << (job->last_step() > 0 ? absl::StrFormat(", loss %.4f", job->last_loss()) : "")
                << (validation ? ", " + ValidationText(*validation) : "") << std::endl;
    }
    return kExitOk;
  }
  std::cerr << FormatJobError(*job);
  return kExitFailed;
}

}  // namespace ringtrain
