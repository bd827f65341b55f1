// Where the model's forward takes its weights from, unit by unit — the seam FSDP
// (worker/engine/parallel/fsdp.h) plugs into, as the attention plan plugs into AttentionPlan.
// Without a source the model uses its own registered parameters.
//
// Units, in forward order: 0 = the token embedding, 1 … n_layers = the transformer blocks,
// n_layers + 1 = the final norm and the output projection. A unit's parameters are listed in the
// order of its submodules' named_parameters() (TransformerImpl::Units()).
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_PARAM_SOURCE_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_PARAM_SOURCE_H_

#include <cstdint>
#include <vector>

#include <ATen/Tensor.h>

namespace ringtrain {

class ParamSource {
 public:
  virtual ~ParamSource() = default;

  // Unit `unit`'s parameters in their full shapes, in Units() order, float32 or already in the
  // compute dtype, connected to the autograd graph when grad mode is on. Called once before each
  // forward of the unit, and again when activation checkpointing recomputes the unit in its
  // backward (`recompute` = true).
  virtual std::vector<at::Tensor> Gather(int64_t unit, bool recompute) = 0;

  // Called with the unit's output right after its forward (or its recompute); the model goes on
  // with what it returns (a source may wrap the output to gather the weights again before the
  // unit's backward).
  virtual at::Tensor AfterForward(int64_t unit, const at::Tensor& output, bool recompute) = 0;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_PARAM_SOURCE_H_
