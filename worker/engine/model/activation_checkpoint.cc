#include "worker/engine/model/activation_checkpoint.h"

#include <torch/torch.h>

#include <utility>

namespace ringtrain {
namespace {

// The checkpointed forward, held by the autograd context as a capsule until the backward.
struct CheckpointCall : torch::CustomClassHolder {
  explicit CheckpointCall(CheckpointedForward f) : run(std::move(f)) {}
  CheckpointedForward run;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            c10::intrusive_ptr<CheckpointCall> call) {
    at::Tensor out;
    {
      torch::NoGradGuard no_grad;  // as Function::apply already runs it: no activations kept
      out = call->run(x, /*recompute=*/false);
    }
    ctx->save_for_backward({x});
    ctx->saved_data["call"] = c10::IValue::make_capsule(std::move(call));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto call =
        c10::static_intrusive_pointer_cast<CheckpointCall>(ctx->saved_data["call"].toCapsule());
    const at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor out;
    {
      torch::AutoGradMode grad_mode(true);  // the engine runs backward functions without it
      out = call->run(x, /*recompute=*/true);
    }
    // A nested backward through the recomputed graph, freed when it is done.
    torch::autograd::backward({out}, {grad_outputs[0]});
    return {x.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor Checkpoint(CheckpointedForward run, const at::Tensor& x) {
  return CheckpointFunction::apply(x, c10::make_intrusive<CheckpointCall>(std::move(run)));
}

}  // namespace ringtrain
