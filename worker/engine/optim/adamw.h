// AdamW with torch.optim.AdamW's (2.11, foreach=False, amsgrad=False) update: decoupled weight
// decay on every parameter (as torchtitan does), bias correction, eps outside the sqrt. Float32
// CPU parameters are updated in one pass (kernels/adamw_rows.h), which agrees with PyTorch's to
// about an ulp a step; others (float64, CUDA) by the ATen chain torch.optim runs, exactly.
#ifndef RINGTRAIN_WORKER_ENGINE_OPTIM_ADAMW_H_
#define RINGTRAIN_WORKER_ENGINE_OPTIM_ADAMW_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

#include "absl/status/status.h"

namespace ringtrain {

struct AdamWOptions {
  double lr = 8e-4;  // the base LR; Step takes the scheduled LR
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

class AdamW {
 public:
  // `params` (name, tensor) must outlive the optimizer; their .grad() is read by Step.
  AdamW(std::vector<std::pair<std::string, at::Tensor>> params, AdamWOptions options);

  // One update at learning rate `lr`. Parameters without a gradient are skipped (as PyTorch does).
  // `copies`, when given, also receives the updated state (a snapshot's buffer, filled in the
  // same pass): 3 tensors per parameter, the parameters', then exp_avg's, then exp_avg_sq's, each
  // of its tensor's shape.
  void Step(double lr, const std::vector<at::Tensor>& copies = {});
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }
  // The moments, one per parameter in its order and shape (the live tensors: a checkpoint reads and
  // fills them in place).
  const std::vector<at::Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<at::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }

  // Optimizer state as name → tensor: "step" (0-dim int64), "exp_avg.<param>",
  // "exp_avg_sq.<param>".
  std::vector<std::pair<std::string, at::Tensor>> StateDict() const;
  // Restores StateDict()'s output; INVALID_ARGUMENT listing missing, extra or mis-shaped entries.
  absl::Status LoadStateDict(const std::vector<std::pair<std::string, at::Tensor>>& state);

 private:
  std::vector<std::pair<std::string, at::Tensor>> params_;
  std::vector<at::Tensor> exp_avg_;
  std::vector<at::Tensor> exp_avg_sq_;
  AdamWOptions options_;
  int64_t step_ = 0;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_OPTIM_ADAMW_H_
