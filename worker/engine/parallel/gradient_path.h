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
// Both hold AdamW over their parameters. For a sharded checkpoint each gives the pieces of the
// state it writes (every element of every tensor written by exactly one rank) and loads only the
// elements it holds from any StateReader — a checkpoint saved on any mesh, or a file of weights.
// The step loop calls ZeroGrad → (backwards) → FinishBackward → ClipGradNorm → Step, with no branch
// on the mesh.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_GRADIENT_PATH_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_GRADIENT_PATH_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

#include "absl/status/status.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/serialize/state_reader.h"

namespace ringtrain {

// Used from the training thread only.
class GradientPath {
 public:
  virtual ~GradientPath() = default;

  // Where this rank's elements of one parameter live: elements [begin, end) of the parameter
  // flattened are `target` (a 1-D view).
  struct Placement {
    std::string name;
    std::vector<int64_t> shape;  // the parameter's full shape
    int64_t begin = 0, end = 0;
    at::Tensor target;
  };

  // Forgets the gradients (set to none) before a step's first backward.
  void ZeroGrad();
  // Whether the backwards that follow reduce their gradients as they go (sharded: FSDP's
  // reduce-scatter per unit, Fsdp::SetGradientSync) or hold them until one with sync on; the
  // replicated path reduces once, in FinishBackward, either way. On by default.
  virtual void SetGradientSync(bool sync) { (void)sync; }
  // After a step failed part-way (a lost peer; the groups are being rebuilt): forgets whatever
  // the step left behind — gradients, and with FSDP gathered parameters and transfers in flight —
  // so that the next step starts as after a completed one.
  virtual void AbandonStep() { ZeroGrad(); }
  // After the step's last backward: every parameter's gradient summed over the world.
  virtual void FinishBackward() = 0;
  // The global gradient norm before clipping; the gradients are scaled to at most `max_norm`.
  virtual double ClipGradNorm(double max_norm) = 0;
  // One AdamW update at learning rate `lr`; `copies` (StateTensors' order and shapes), when given,
  // also receive the updated state in the same pass (an in-memory snapshot's buffer).
  void Step(double lr, const std::vector<at::Tensor>& copies = {}) { optimizer_->Step(lr, copies); }

  // The parameters ("model.<name>") and AdamW's moments ("optimizer.exp_avg.<name>",
  // "optimizer.exp_avg_sq.<name>") this rank writes to a sharded checkpoint: views of the live
  // state, float32. Every element of every tensor is in exactly one rank's pieces.
  std::vector<StatePiece> CheckpointPieces();
  // The ranks that write checkpoint pieces are [0, checkpoint_writers()).
  virtual int64_t checkpoint_writers() const = 0;
  // Sets the parameters from prefix + name in `reader`, reading only the elements this rank holds.
  // INVALID_ARGUMENT (CheckStateMatches) when names or shapes differ; nothing is read then.
  absl::Status LoadParameters(const StateReader& reader, const std::string& prefix);
  // Sets AdamW's moments from "optimizer.exp_avg.<name>" / "optimizer.exp_avg_sq.<name>" in
  // `reader` and its step count, reading only this rank's elements. INVALID_ARGUMENT as above.
  absl::Status LoadOptimizer(const StateReader& reader, int64_t optimizer_step);
  int64_t optimizer_step() const { return optimizer_->step_count(); }
  void set_optimizer_step(int64_t step) { optimizer_->set_step_count(step); }
  // This rank's whole training state as live tensors in a fixed order — what it updates (the
  // parameters or its shards), then AdamW's first and second moments of each — for in-memory
  // snapshots, which copy them out and back in place.
  std::vector<at::Tensor> StateTensors() const;

  // What the optimizer updates: the parameters, or this rank's shards.
  const std::vector<at::Tensor>& parameters() const { return params_; }

 protected:
  // `named` (name, tensor) are the optimizer's parameters; their .grad() is read by Step.
  GradientPath(std::vector<std::pair<std::string, at::Tensor>> named, const AdamWOptions& adam);

  // The elements this rank holds (`for_writing` false) or writes to a checkpoint (true: a part of
  // them, so that one rank writes each element), located in `per_param` — tensors shaped like
  // params_, in its order: the parameters themselves or AdamW's moments.
  virtual std::vector<Placement> Placements(const std::vector<at::Tensor>& per_param,
                                            bool for_writing) = 0;
  // Every parameter's name and full shape, in the model's order.
  virtual ExpectedShapes ParameterShapes() const = 0;

  std::vector<at::Tensor> params_;
  std::unique_ptr<AdamW> optimizer_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_GRADIENT_PATH_H_
