#include "worker/engine/model/attention_plan.h"

#include <torch/torch.h>

#include <utility>

namespace ringtrain {
namespace {

// What one Attend call's backward needs besides the saved tensors, held by the autograd context
// as a capsule (an intrusive_ptr), never as a pointer cast to an integer.
struct AttentionCall : torch::CustomClassHolder {
  AttentionCall(std::shared_ptr<AttentionPlan> k, BlockPositions p, double s)
      : plan(std::move(k)), positions(std::move(p)), scale(s) {}
  std::shared_ptr<AttentionPlan> plan;
  BlockPositions positions;
  double scale;
};

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v,
                            c10::intrusive_ptr<AttentionCall> call, AttentionMemo* memo) {
    const at::Tensor qc = q.contiguous();
    const at::Tensor kv = torch::stack({k, v}).contiguous();  // (2, B, Hk, L, D)
    at::Tensor out, lse;
    if (memo != nullptr && memo->out.defined()) {
      out = std::exchange(memo->out, at::Tensor());
      lse = std::exchange(memo->lse, at::Tensor());
    } else {
      BlockOutput result = call->plan->Forward(qc, kv, call->positions, call->scale);
      out = result.out.to(q.scalar_type());  // float32 merges, compute-dtype output
      lse = result.lse;
      if (memo != nullptr) *memo = AttentionMemo{out, lse};
    }
    ctx->save_for_backward({qc, kv, out, lse});
    ctx->saved_data["call"] = c10::IValue::make_capsule(std::move(call));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto call =
        c10::static_intrusive_pointer_cast<AttentionCall>(ctx->saved_data["call"].toCapsule());
    const auto saved = ctx->get_saved_variables();
    auto [dq, dkv] =
        call->plan->Backward(saved[0], saved[1], saved[2], saved[3], grad_outputs[0].contiguous(),
                             call->positions, call->scale);
    return {dq.to(saved[0].scalar_type()), dkv[0].to(saved[1].scalar_type()),
            dkv[1].to(saved[1].scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor AttentionPlan::Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const BlockPositions& positions, double scale,
                                 AttentionMemo* memo) {
  return AttentionFunction::apply(
      q, k, v, c10::make_intrusive<AttentionCall>(shared_from_this(), positions, scale), memo);
}

BlockOutput LocalAttentionPlan::Forward(const at::Tensor& q, const at::Tensor& kv,
                                        const BlockPositions& positions, double scale) {
  AttentionComputeTimer timer(stats_);
  BlockOutput result = block_->Forward(q, kv[0], kv[1], positions, positions, scale);
  stats_.scores_computed += result.scores_computed;
  return result;
}

std::pair<at::Tensor, at::Tensor> LocalAttentionPlan::Backward(
    const at::Tensor& q, const at::Tensor& kv, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& dout, const BlockPositions& positions, double scale) {
  AttentionComputeTimer timer(stats_);
  BlockGrads grads = block_->Backward(q, kv[0], kv[1], dout, MakeFinalStats(out, lse, dout),
                                      positions, positions, scale);
  return {grads.dq, torch::stack({grads.dk, grads.dv})};
}

at::Tensor LocalCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const BlockPositions& positions, double scale,
                                const AttentionTiling& tiling) {
  return std::make_shared<LocalAttentionPlan>(tiling)->Attend(q, k, v, positions, scale);
}

}  // namespace ringtrain
