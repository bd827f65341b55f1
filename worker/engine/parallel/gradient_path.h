// The gradient path: what happens to the parameters' gradients after the step's backwards, and
// what the optimizer updates. One of two, chosen by Parallelize (parallelize.h) from the mesh:
//
//   replicated  every rank holds the whole model; FinishBackward all-reduces the gradients over
//               the world (in training.mixed_precision_reduce, grad_sync.h); the norm is local.
//   sharded     FSDP (fsdp.h): the model's weights come from per-unit shards; each backward
//               already reduce-scattered its units' gradients over the FSDP group, so
//               FinishBackward sums the shards over the replicas; the norm sums the shards'
//               squared norms over the FSDP group.
//
// Both hold AdamW over their parameters, and both give and take checkpoints in the replicated
// run's format (full tensors by name), so a run resumes on any mesh. The step loop calls
// ZeroGrad → (backwards) → FinishBackward → ClipGradNorm → Step, with no branch on the mesh.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_GRADIENT_PATH_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_GRADIENT_PATH_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

#include "absl/status/status.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/serialize/state_dict_io.h"

namespace ringtrain {

// The model's parameters and the optimizer's state as full tensors by name.
struct FullState {
  StateDict model;
  StateDict optimizer;
};

// Used from the training thread only.
class GradientPath {
 public:
  virtual ~GradientPath() = default;

  // Forgets the gradients (set to none) before a step's first backward.
  void ZeroGrad();
  // After the step's last backward: every parameter's gradient summed over the world.
  virtual void FinishBackward() = 0;
  // The global gradient norm before clipping; the gradients are scaled to at most `max_norm`.
  virtual double ClipGradNorm(double max_norm) = 0;
  // One AdamW update at learning rate `lr`.
  void Step(double lr) { optimizer_->Step(lr); }

  // Whether GatherFullState is a collective that every rank must call (sharded), or rank 0 alone
  // calls it (replicated).
  virtual bool gather_is_collective() const = 0;
  // The state to checkpoint, in the replicated run's format.
  virtual FullState GatherFullState() = 0;
  // Restores the optimizer's state from the replicated run's format. INVALID_ARGUMENT naming
  // `source` and what does not match.
  virtual absl::Status LoadOptimizerState(const StateDict& full, const std::string& source) = 0;

  // What the optimizer updates: the parameters, or this rank's shards.
  const std::vector<at::Tensor>& parameters() const { return params_; }

 protected:
  // `named` (name, tensor) are the optimizer's parameters; their .grad() is read by Step.
  GradientPath(std::vector<std::pair<std::string, at::Tensor>> named, const AdamWOptions& adam);

  std::vector<at::Tensor> params_;
  std::unique_ptr<AdamW> optimizer_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_GRADIENT_PATH_H_
