// Reentrant activation checkpointing: a piece of the forward that keeps only its input, and is
// computed again in the backward to get its gradients.
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_ACTIVATION_CHECKPOINT_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_ACTIVATION_CHECKPOINT_H_

#include <functional>

#include <ATen/Tensor.h>

namespace ringtrain {

// The checkpointed forward on x; called twice (recompute = false, then true inside the backward),
// it must compute the same result both times. It owns whatever it needs until the backward.
using CheckpointedForward = std::function<at::Tensor(const at::Tensor& x, bool recompute)>;

// run(x, false) without autograd, keeping only x and `run`. Its backward runs run(x', true) with
// autograd on a fresh leaf x' (x detached), back-propagates the incoming gradient through that
// graph — parameter gradients go wherever run's weights came from — and returns x'.grad as x's
// gradient. x must require grad, or there is no backward.
at::Tensor Checkpoint(CheckpointedForward run, const at::Tensor& x);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_ACTIVATION_CHECKPOINT_H_
