// A job's stored steps, read from the coordinator: what `ringctl plot`, `compare` and `export`
// work on. The WatchJob history of a finished job, or of a running one up to the last step the
// coordinator had when asked (the live rest of the stream is cancelled).
#ifndef RINGTRAIN_CLIENT_JOB_STEPS_H_
#define RINGTRAIN_CLIENT_JOB_STEPS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/coordinator_client.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

struct JobSteps {
  v1::Job job;                       // GetJob's answer, before the steps were read
  std::vector<v1::StepEvent> steps;  // ascending step, one per step, from max(from_step, 1)
};

// GetJob (with a deadline) first; then WatchJob from `from_step`. For a finished job the stream is
// read to its end. For one that is not finished the read stops once it has delivered the job's
// last_step from that GetJob (the stream would go on live) and the stream is cancelled; with no
// steps yet no stream is opened. A step that appears twice keeps its latest event.
//
// Errors: GetJob's (NOT_FOUND for an unknown id, UNAVAILABLE "cannot reach coordinator at ...");
// the stream's; DEADLINE_EXCEEDED when no event arrives for `idle_timeout` before the read is
// complete.
absl::StatusOr<JobSteps> FetchJobSteps(
    CoordinatorClient& client, const std::string& job_id, int64_t from_step = 0,
    std::chrono::milliseconds idle_timeout = std::chrono::seconds(30));

// The event's JSONL record as the trainer wrote it (one line, no newline); should a coordinator not
// relay it, {"step":N,"loss":X} from the event's fields (protobuf carries them bit-exact).
std::string StepRecordLine(const v1::StepEvent& event);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_JOB_STEPS_H_
