// What TensorBoard shows of a step: the scalars of one StepRecord (common/record/step_record.h),
// under torchtitan's tags, so the trainer's live event files and `ringctl tensorboard`'s export of
// the stored steps hold the same values:
//   loss_metrics/global_avg_loss   loss            throughput(tps)             tokens_per_second
//   grad_norm                      grad_norm       time_metrics/end_to_end(s)  step_seconds
//   lr                             lr              memory/max_rss(GiB)         peak_memory_bytes
//   memory/max_active(GiB)   device_memory_peak_bytes (when > 0: a CUDA rank's allocator peak)
//   validation_metrics/loss  validation_loss (the steps that validated)
//   mfu(%)                   mfu_percent (when the trainer knows a peak)
#ifndef RINGTRAIN_COMMON_TENSORBOARD_STEP_SCALARS_H_
#define RINGTRAIN_COMMON_TENSORBOARD_STEP_SCALARS_H_

#include <vector>

#include "common/record/step_record.h"
#include "common/tensorboard/event_file.h"

namespace ringtrain {

std::vector<Scalar> StepScalars(const StepRecord& record);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_TENSORBOARD_STEP_SCALARS_H_
