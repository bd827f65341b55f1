// Following a job: `ringctl watch`, `ringctl submit --follow` and `ringctl loss-compare
// --coordinator` all read a job's WatchJob stream to its end through FollowJob, which survives a
// restarted coordinator by resuming from the last step seen.
#ifndef RINGTRAIN_CLIENT_WATCH_H_
#define RINGTRAIN_CLIENT_WATCH_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/coordinator_client.h"
#include "client/job_format.h"
#include "client/validation_view.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

// Prints watch events as they arrive. Table mode: a line per state change; steps as one live
// progress line rewritten in place on a terminal, or (kEveryStep only) a plain line per step when
// stdout is not one; a line when the trainer names a straggler or stops naming it. Json mode: one
// JSON object a line per event (StepEventJson / StateChangeJson / StragglerEventJson).
// Not thread-safe; `out` must outlive the printer.
class WatchPrinter {
 public:
  enum class Steps {
    kEveryStep,     // off a terminal, one line per step
    kTerminalOnly,  // off a terminal, no step lines (loss-compare keeps its own report)
  };
  WatchPrinter(OutputFormat format, std::ostream* out, bool terminal, Steps steps);

  void set_total_steps(int64_t total_steps) { total_steps_ = total_steps; }
  void OnState(const v1::StateChange& change);
  void OnStep(const v1::StepEvent& event);
  // Ends a live progress line, if one is showing.
  void EndLine();
  // The newest validation seen ([validation] enable, or an eval job's result).
  const std::optional<ValidationPoint>& validation() const { return validation_; }

 private:
  OutputFormat format_;
  std::ostream* out_;
  bool terminal_;
  Steps steps_;
  int64_t total_steps_ = 0;
  int64_t steps_seen_ = 0;
  double step_seconds_sum_ = 0;
  bool live_line_ = false;   // a progress line without its newline is on the terminal
  StragglerNote straggler_;  // the straggler named as of the last step seen
  std::optional<ValidationPoint> validation_;
};

struct FollowOptions {
  // First step to replay (0 = the whole history).
  int64_t from_step = 0;
  // After a broken stream, how many reconnections in a row to try (waiting 0.5 s, 1 s, 2 s, ...
  // between them) before giving up. Any event received resets the count.
  int max_reconnects = 5;
  std::chrono::milliseconds first_backoff{500};
  // Called once per new step, in step order, after the printer (may be empty).
  std::function<void(const v1::StepEvent&)> on_step;
  // Called once per new state change, after the printer (may be empty).
  std::function<void(const v1::StateChange&)> on_state;
};

// Follows `job_id` until it ends: GetJob with a deadline first (so an unreachable coordinator is an
// error within seconds, not a hang), then WatchJob. A stream that breaks before the job has ended
// is reopened from the last step seen + 1; state changes and steps seen before are not printed
// twice. `printer` may be null. Returns the job as GetJob reports it once it has ended (SUCCEEDED,
// FAILED or CANCELLED). Errors: the first GetJob's (NOT_FOUND for an unknown id, UNAVAILABLE
// "cannot reach coordinator at ..."); a non-retryable stream error; UNAVAILABLE when the stream
// broke and could not be resumed.
absl::StatusOr<v1::Job> FollowJob(CoordinatorClient& client, const std::string& job_id,
                                  const FollowOptions& options, WatchPrinter* printer);

// `ringctl watch` (and the second half of `submit --follow`): FollowJob with a printer on stdout,
// then the outcome: a one-line summary for SUCCEEDED, the job's error (rank, worker, exit status,
// stderr tail) on stderr for FAILED or CANCELLED. Returns kExitOk only for SUCCEEDED; kExitFailed
// for FAILED/CANCELLED; kExitUnreachable when the coordinator could not be reached or the stream
// broke for good; ExitCodeFor(error) otherwise. Ctrl-C ends it as client/interrupt.h says (the job
// left running, or with `cancel_on_interrupt` cancelled), exit kExitInterrupted.
int RunWatch(CoordinatorClient& client, const std::string& job_id, int64_t from_step,
             OutputFormat format, bool cancel_on_interrupt);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_WATCH_H_
