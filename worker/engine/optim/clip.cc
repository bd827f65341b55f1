#include "worker/engine/optim/clip.h"

#include <torch/torch.h>

#include <cmath>

namespace ringtrain {
namespace {

at::Tensor TotalNorm(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> norms;
  for (const auto& p : params) {
    if (p.grad().defined()) norms.push_back(torch::norm(p.grad().detach(), 2));
  }
  if (norms.empty()) return torch::zeros({});
  return torch::norm(torch::stack(norms), 2);
}

}  // namespace

double GlobalGradNorm(const std::vector<at::Tensor>& params) {
  return TotalNorm(params).item<double>();
}

namespace {

double ScaleBy(const std::vector<at::Tensor>& params, double max_norm, const at::Tensor& total) {
  // Tensor arithmetic in float32, like PyTorch, so the coefficient rounds the same way.
  const at::Tensor coef = torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
  for (const auto& p : params) {
    if (p.grad().defined()) p.grad().mul_(coef);
  }
  return total.item<double>();
}

}  // namespace

double ClipShardedGradNorm(const std::vector<at::Tensor>& params, double max_norm,
                           const std::function<double(double)>& sum_over_ranks) {
  torch::NoGradGuard no_grad;
  double local = 0;
  for (const auto& p : params) {
    if (p.grad().defined()) local += p.grad().detach().to(at::kDouble).pow(2).sum().item<double>();
  }
  const double total = std::sqrt(sum_over_ranks(local));
  return ScaleBy(params, max_norm, torch::full({}, total, at::kFloat));
}

double ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  return ScaleBy(params, max_norm, TotalNorm(params));
}

}  // namespace ringtrain
