// A job's validation losses as ringctl shows them (`watch`, `get`, `top`, `plot`, `compare`,
// `tensorboard`): read from the step records' validation_loss (common/record/step_record.h), which
// a training job with [validation] enable writes every validation.freq steps and after its last,
// and an eval job's one record (step 1) holds.
#ifndef RINGTRAIN_CLIENT_VALIDATION_VIEW_H_
#define RINGTRAIN_CLIENT_VALIDATION_VIEW_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/coordinator_client.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

struct ValidationPoint {
  int64_t step = 0;
  double loss = 0;  // nats per token; NaN when the trainer wrote a non-finite one
};

// The event's validation loss; nullopt for a step that did not validate.
std::optional<double> ValidationLossOf(const v1::StepEvent& event);

// The steps of `steps` that validated, in their order.
std::vector<ValidationPoint> ValidationPoints(const std::vector<v1::StepEvent>& steps);

// The first step that may hold `job`'s newest validation: for a training job whose config (with
// its overrides) has validation.enable, its last_step when that is its last, else the last multiple
// of validation.freq up to it (0: none yet); 1 for an eval job that has its record; nullopt when
// the job does not validate or its config does not parse.
std::optional<int64_t> LatestValidationStep(const v1::Job& job);

// The job's newest validation, read from the coordinator's stored steps from
// LatestValidationStep on (a step or two, not the whole history); nullopt when there is none.
// Errors as FetchJobSteps'.
absl::StatusOr<std::optional<ValidationPoint>> FetchLatestValidation(CoordinatorClient& client,
                                                                     const v1::Job& job);

// "validation loss 5.1234 at step 20".
std::string ValidationText(const ValidationPoint& point);

// A JSON object's text with "validation": {"step": N, "loss": X} added when `point` is set
// (`ringctl get --output json`: the Job message, then the newest validation).
std::string WithValidationJson(const std::string& object_json,
                               const std::optional<ValidationPoint>& point);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_VALIDATION_VIEW_H_
