// Learning-rate schedule: linear warmup, stable, then linear or cosine decay. Torch-free.
//
// For step k (1-based) of N with W warmup steps and D = round(N · decay_ratio) decay steps, both
// first fitted into the run (common/config/lr_phases.h: W <= N, then D <= N − W):
//   k <= W            factor = k / W
//   k <= N − D        factor = 1
//   otherwise         progress = (k − (N − D)) / D, f = 1 − progress (linear) or
//                     ½(1 + cos(π·progress)) (cosine); factor = min + (1 − min)·f
// so the last step runs at min_lr_factor · lr. W = 0 and D = 0 is a constant LR.
#ifndef RINGTRAIN_WORKER_ENGINE_OPTIM_LR_SCHEDULE_H_
#define RINGTRAIN_WORKER_ENGINE_OPTIM_LR_SCHEDULE_H_

#include <cstdint>

#include "common/config/choices.h"

namespace ringtrain {

struct LrScheduleOptions {
  double base_lr = 8e-4;
  int64_t total_steps = 1;
  int64_t warmup_steps = 0;
  double decay_ratio = 0.0;
  DecayType decay_type = DecayType::kLinear;
  double min_lr_factor = 0.0;
};

class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleOptions& options);
  // The LR of step `step` (1-based).
  double LrAt(int64_t step) const;
  double FactorAt(int64_t step) const;
  int64_t decay_steps() const { return decay_steps_; }

 private:
  LrScheduleOptions options_;
  int64_t decay_steps_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_OPTIM_LR_SCHEDULE_H_
