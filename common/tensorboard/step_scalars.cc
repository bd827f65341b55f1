#include "common/tensorboard/step_scalars.h"

namespace ringtrain {

std::vector<Scalar> StepScalars(const StepRecord& r) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::vector<Scalar> scalars = {
      {"loss_metrics/global_avg_loss", float(r.loss)},
      {"grad_norm", float(r.grad_norm)},
      {"lr", float(r.lr)},
      {"throughput(tps)", float(r.tokens_per_second)},
      {"time_metrics/end_to_end(s)", float(r.step_seconds)},
      {"memory/max_rss(GiB)", float(r.peak_memory_bytes / kGiB)},
  };
  if (r.device_memory_peak_bytes > 0) {
    scalars.push_back({"memory/max_active(GiB)", float(r.device_memory_peak_bytes / kGiB)});
  }
  if (r.validation_loss.has_value()) {
    scalars.push_back({"validation_metrics/loss", float(*r.validation_loss)});
  }
  if (r.mfu_percent.has_value()) scalars.push_back({"mfu(%)", float(*r.mfu_percent)});
  return scalars;
}

}  // namespace ringtrain
