#include "client/validation_view.h"

#include "absl/strings/str_format.h"
#include "client/job_steps.h"
#include "common/config/job_config.h"
#include "common/record/step_record.h"
#include "nlohmann/json.hpp"

namespace ringtrain {

std::optional<double> ValidationLossOf(const v1::StepEvent& event) {
  const absl::StatusOr<std::optional<StepRecord>> record =
      ParseStepRecord(event.record_json(), MissingFigure::kZero);
  if (!record.ok() || !record->has_value()) return std::nullopt;
  return (*record)->validation_loss;
}

std::vector<ValidationPoint> ValidationPoints(const std::vector<v1::StepEvent>& steps) {
  std::vector<ValidationPoint> points;
  for (const v1::StepEvent& event : steps) {
    if (const std::optional<double> loss = ValidationLossOf(event)) {
      points.push_back({event.step(), *loss});
    }
  }
  return points;
}

std::optional<int64_t> LatestValidationStep(const v1::Job& job) {
  const std::vector<std::string> overrides(job.overrides().begin(), job.overrides().end());
  const absl::StatusOr<JobConfig> config =
      ParseJobConfig(job.config_toml(), overrides, job.job_id());
  if (!config.ok()) return std::nullopt;
  if (config->job.mode == JobMode::kEval) return job.last_step() >= 1 ? 1 : 0;
  if (!config->validation.enable) return std::nullopt;
  const int64_t last = job.last_step();
  if (last >= config->training.steps) return last;
  return last / config->validation.freq * config->validation.freq;
}

absl::StatusOr<std::optional<ValidationPoint>> FetchLatestValidation(CoordinatorClient& client,
                                                                     const v1::Job& job) {
  const std::optional<int64_t> from = LatestValidationStep(job);
  if (!from.has_value() || *from < 1) return std::nullopt;
  absl::StatusOr<JobSteps> fetched = FetchJobSteps(client, job.job_id(), *from);
  if (!fetched.ok()) return fetched.status();
  const std::vector<ValidationPoint> points = ValidationPoints(fetched->steps);
  if (points.empty()) return std::nullopt;
  return points.back();
}

std::string WithValidationJson(const std::string& object_json,
                               const std::optional<ValidationPoint>& point) {
  if (!point.has_value()) return object_json;
  nlohmann::json object = nlohmann::json::parse(object_json, nullptr, /*allow_exceptions=*/false);
  if (!object.is_object()) return object_json;
  object["validation"] = {{"step", point->step}, {"loss", point->loss}};
  return object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ValidationText(const ValidationPoint& point) {
  return absl::StrFormat("validation loss %.4f at step %d", point.loss, point.step);
}

}  // namespace ringtrain
