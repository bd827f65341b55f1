// How many steps the learning-rate schedule warms up and decays for, once fitted into the run.
// torchtitan's rule: a warmup longer than the run is clamped to the run, then a decay that does not
// fit after the warmup is shortened to what is left — with a warning each, never a refusal, so a
// short run of a long config (`--training.steps=10` on the debug config) just works.
#ifndef RINGTRAIN_COMMON_CONFIG_LR_PHASES_H_
#define RINGTRAIN_COMMON_CONFIG_LR_PHASES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/job_config.h"

namespace ringtrain {

struct LrPhases {
  int64_t warmup_steps = 0;
  int64_t decay_steps = 0;
  // One line per clamp, naming the keys, the values and what was used instead, e.g.
  // "lr_scheduler.warmup_steps = 200 is more than training.steps = 10: clamped to 10".
  std::vector<std::string> warnings;
};

// The phases of a run of `steps` steps (> 0) with `warmup_steps` (>= 0) and decay_ratio in [0, 1]:
// warmup = min(warmup_steps, steps); decay = round(steps × decay_ratio), then at most
// steps − warmup.
LrPhases ResolveLrPhases(int64_t steps, int64_t warmup_steps, double decay_ratio);

// ResolveLrPhases of a valid config's [training] and [lr_scheduler]; no warnings in eval mode
// (no optimizer steps are taken).
LrPhases ResolveLrPhases(const JobConfig& config);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_LR_PHASES_H_
