#include "worker/engine/model/brgemm_linear.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <vector>

#include "worker/engine/kernels/brgemm_matmul.h"
#include "worker/engine/kernels/cpu_isa.h"

namespace ringtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::tensor_list;

// x (R, C) · weight (O, C)ᵀ → (R, O).
class BrgemmLinearFunction : public Function<BrgemmLinearFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
    const at::Tensor weight_t = weight.t().contiguous();  // (C, O)
    at::Tensor y = at::empty({rows, out}, x.options());
    BrgemmMatmul(rows, out, in, x.data_ptr<float>(), in, weight_t.data_ptr<float>(), out,
                 y.data_ptr<float>(), out);
    ctx->save_for_backward({x, weight});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1];
    const at::Tensor dy = grads[0].contiguous();
    const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
    at::Tensor dx;
    if (ctx->needs_input_grad(0)) {
      dx = at::empty({rows, in}, x.options());
      BrgemmMatmul(rows, in, out, dy.data_ptr<float>(), out, weight.data_ptr<float>(), in,
                   dx.data_ptr<float>(), in);
    }
    at::Tensor dweight;
    if (ctx->needs_input_grad(1)) dweight = WeightGrad(dy, x);
    return {dx, dweight};
  }

 private:
  // dW = dyᵀ · x, summed over the R rows; dy is transposed piece by piece inside the GEMM.
  static at::Tensor WeightGrad(const at::Tensor& dy, const at::Tensor& x) {
    const int64_t rows = x.size(0), in = x.size(1), out = dy.size(1);
    at::Tensor dweight = at::empty({out, in}, x.options());
    BrgemmMatmulTransposedA(out, in, rows, dy.data_ptr<float>(), out, x.data_ptr<float>(), in,
                            dweight.data_ptr<float>(), in);
    return dweight;
  }
};

}  // namespace

bool BrgemmLinearApplies(const at::Tensor& x, const at::Tensor& weight) {
  return ActiveF32Gemm() == F32Gemm::kBrgemm && x.device().is_cpu() && weight.device().is_cpu() &&
         x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && weight.dim() == 2 &&
         x.dim() >= 1;
}

at::Tensor BrgemmLinear(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(x.size(-1) == weight.size(1), "BrgemmLinear: x has ", x.size(-1),
              " features, the weight takes ", weight.size(1));
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.size(0);
  const at::Tensor y =
      BrgemmLinearFunction::apply(x.contiguous().view({-1, x.size(-1)}), weight.contiguous());
  return y.view(shape);
}

}  // namespace ringtrain
