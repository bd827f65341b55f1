// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_ (norm_type 2).
#ifndef RINGTRAIN_WORKER_ENGINE_OPTIM_CLIP_H_
#define RINGTRAIN_WORKER_ENGINE_OPTIM_CLIP_H_

#include <functional>
#include <vector>

#include <ATen/Tensor.h>

namespace ringtrain {

// The L2 norm of all gradients together: ‖(‖g_1‖, …, ‖g_n‖)‖, as PyTorch stacks per-tensor norms.
// Parameters without a gradient are skipped. Returns a float (may be inf/nan).
double GlobalGradNorm(const std::vector<at::Tensor>& params);

// Scales every gradient by min(1, max_norm / (total_norm + 1e-6)). Returns total_norm (pre-clip).
double ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm);

// The same for gradients sharded over ranks (FSDP): `params` are this rank's shards, and
// `sum_over_ranks` sums a float64 over the ranks that hold the other shards; the norm is
// sqrt(sum over ranks of the local squared norms).
double ClipShardedGradNorm(const std::vector<at::Tensor>& params, double max_norm,
                           const std::function<double(double)>& sum_over_ranks);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_OPTIM_CLIP_H_
