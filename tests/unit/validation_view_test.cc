// ringctl's reading of validation losses (client/validation_view.h): from the step records, the
// step the newest validation is at (from the job's config and overrides), and get's JSON.
#include "client/validation_view.h"

#include <gtest/gtest.h>

#include <cmath>

#include "nlohmann/json.hpp"

namespace ringtrain {
namespace {

v1::StepEvent Event(int64_t step, const std::string& record) {
  v1::StepEvent event;
  event.set_step(step);
  event.set_record_json(record);
  return event;
}

TEST(ValidationViewTest, PointsFromTheRecords) {
  const std::vector<v1::StepEvent> steps = {
      Event(1, R"({"step": 1, "loss": 6.5})"),
      Event(2, R"({"step": 2, "loss": 6.0, "validation_loss": 5.75})"), Event(3, "not json"),
      Event(4, R"({"step": 4, "loss": 5.5, "validation_loss": null})")};
  EXPECT_FALSE(ValidationLossOf(steps[0]).has_value());
  const std::vector<ValidationPoint> points = ValidationPoints(steps);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].step, 2);
  EXPECT_EQ(points[0].loss, 5.75);
  EXPECT_TRUE(std::isnan(points[1].loss));
  EXPECT_EQ(ValidationText(points[0]), "validation loss 5.7500 at step 2");
}

v1::Job JobAt(int64_t last_step, std::vector<std::string> overrides) {
  v1::Job job;
  job.set_job_id("job-000001");
  job.set_config_toml("[training]\nsteps = 25\n");
  job.set_last_step(last_step);
  for (const std::string& o : overrides) job.add_overrides(o);
  return job;
}

TEST(ValidationViewTest, TheNewestValidatedStep) {
  EXPECT_FALSE(LatestValidationStep(JobAt(12, {})).has_value());               // not validating
  EXPECT_EQ(LatestValidationStep(JobAt(12, {"validation.enable=true"})), 10);  // freq 10
  EXPECT_EQ(LatestValidationStep(JobAt(7, {"validation.enable=true", "validation.freq=3"})), 6);
  EXPECT_EQ(LatestValidationStep(JobAt(9, {"validation.enable=true"})), 0);    // none yet
  EXPECT_EQ(LatestValidationStep(JobAt(25, {"validation.enable=true"})), 25);  // the last
  EXPECT_EQ(LatestValidationStep(JobAt(1, {"job.mode=eval"})), 1);
  EXPECT_EQ(LatestValidationStep(JobAt(0, {"job.mode=eval"})), 0);
  EXPECT_FALSE(LatestValidationStep(JobAt(3, {"validation.freq=0"})).has_value());  // invalid
}

TEST(ValidationViewTest, GetJsonGainsTheValidation) {
  EXPECT_EQ(WithValidationJson(R"({"job_id":"j"})", std::nullopt), R"({"job_id":"j"})");
  const nlohmann::json j =
      nlohmann::json::parse(WithValidationJson(R"({"job_id":"j"})", ValidationPoint{4, 0.1}));
  EXPECT_EQ(j["job_id"], "j");
  EXPECT_EQ(j["validation"]["step"], 4);
  EXPECT_EQ(j["validation"]["loss"].get<double>(), 0.1);
}

}  // namespace
}  // namespace ringtrain
