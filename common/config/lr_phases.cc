#include "common/config/lr_phases.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/config/config_validate.h"

namespace ringtrain {

LrPhases ResolveLrPhases(int64_t steps, int64_t warmup_steps, double decay_ratio) {
  LrPhases phases;
  phases.warmup_steps = warmup_steps;
  if (warmup_steps > steps) {
    phases.warmup_steps = steps;
    phases.warnings.push_back(absl::StrCat("lr_scheduler.warmup_steps = ", warmup_steps,
                                           " is more than training.steps = ", steps,
                                           ": clamped to ", steps));
  }
  const int64_t decay = std::llround(static_cast<double>(steps) * decay_ratio);
  phases.decay_steps = decay;
  if (phases.warmup_steps + decay > steps) {
    phases.decay_steps = steps - phases.warmup_steps;
    phases.warnings.push_back(absl::StrCat(
        "lr_scheduler.warmup_steps (", phases.warmup_steps,
        ") plus the decay steps round(training.steps × lr_scheduler.decay_ratio) = round(", steps,
        " × ", config_internal::FormatDouble(decay_ratio), ") = ", decay,
        " is more than training.steps = ", steps, ": decay clamped to ", phases.decay_steps,
        " steps"));
  }
  return phases;
}

LrPhases ResolveLrPhases(const JobConfig& config) {
  LrPhases phases = ResolveLrPhases(config.training.steps, config.lr_scheduler.warmup_steps,
                                    config.lr_scheduler.decay_ratio);
  if (config.job.mode == JobMode::kEval) phases.warnings.clear();
  return phases;
}

}  // namespace ringtrain
