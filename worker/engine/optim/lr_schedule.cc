#include "worker/engine/optim/lr_schedule.h"

#include <cmath>

#include "common/config/lr_phases.h"

namespace ringtrain {

LrSchedule::LrSchedule(const LrScheduleOptions& options) : options_(options) {
  const LrPhases phases =
      ResolveLrPhases(options.total_steps, options.warmup_steps, options.decay_ratio);
  options_.warmup_steps = phases.warmup_steps;
  decay_steps_ = phases.decay_steps;
}

double LrSchedule::FactorAt(int64_t step) const {
  const int64_t warmup = options_.warmup_steps;
  const int64_t decay_start = options_.total_steps - decay_steps_;
  if (step <= warmup) return double(step) / double(warmup);
  if (step <= decay_start || decay_steps_ == 0) return 1.0;
  const double progress = double(step - decay_start) / double(decay_steps_);
  const double f = options_.decay_type == DecayType::kCosine
                       ? 0.5 * (1.0 + std::cos(M_PI * progress))
                       : 1.0 - progress;
  return options_.min_lr_factor + (1.0 - options_.min_lr_factor) * f;
}

double LrSchedule::LrAt(int64_t step) const { return options_.base_lr * FactorAt(step); }

}  // namespace ringtrain
