// Comparisons the numerical unit tests share: differences taken in float64, and leaf copies for
// running autograd twice on the same inputs.
#ifndef RINGTRAIN_TESTS_UNIT_TENSOR_COMPARE_H_
#define RINGTRAIN_TESTS_UNIT_TENSOR_COMPARE_H_

#include <torch/torch.h>

#include <algorithm>

namespace ringtrain {

// max |a − b|, in float64.
inline double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// max |a − b| over max |b|: a relative error for tensors whose entries vary in size.
inline double RelDiff(const at::Tensor& a, const at::Tensor& b) {
  return MaxDiff(a, b) / std::max(1e-30, b.to(torch::kFloat64).abs().max().item<double>());
}

// A fresh leaf with t's values that requires grad.
inline at::Tensor Leaf(const at::Tensor& t) { return t.detach().clone().requires_grad_(); }

}  // namespace ringtrain

#endif  // RINGTRAIN_TESTS_UNIT_TENSOR_COMPARE_H_
