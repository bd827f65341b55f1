#include "worker/engine/optim/adamw.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/engine/kernels/adamw_rows.h"

namespace ringtrain {

AdamW::AdamW(std::vector<std::pair<std::string, at::Tensor>> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  for (const auto& [name, p] : params_) {
    exp_avg_.push_back(torch::zeros_like(p, at::MemoryFormat::Preserve));
    exp_avg_sq_.push_back(torch::zeros_like(p, at::MemoryFormat::Preserve));
  }
}

namespace {

// Float32 CPU tensors of one layout, which AdamWUpdate takes as flat arrays.
bool Fusable(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

}  // namespace

void AdamW::Step(double lr, const std::vector<at::Tensor>& copies) {
  torch::NoGradGuard no_grad;
  const size_t n = params_.size();
  TORCH_CHECK(copies.empty() || copies.size() == 3 * n, "AdamW::Step: ", copies.size(),
              " copies for ", n, " parameters (3 per parameter wanted)");
  ++step_;
  const double beta1 = options_.beta1, beta2 = options_.beta2;
  // Same scalar arithmetic (in double) as torch.optim.adamw._single_tensor_adamw.
  const double bias_correction1 = 1 - std::pow(beta1, double(step_));
  const double bias_correction2 = 1 - std::pow(beta2, double(step_));
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  AdamWScalars scalars;
  scalars.decay = float(1 - lr * options_.weight_decay);
  scalars.beta1 = float(beta1);
  scalars.one_minus_beta1 = float(1 - beta1);
  scalars.beta2 = float(beta2);
  scalars.one_minus_beta2 = float(1 - beta2);
  scalars.bias_correction2_sqrt = float(bias_correction2_sqrt);
  scalars.eps = float(options_.eps);
  scalars.neg_step_size = float(-step_size);
  for (size_t i = 0; i < n; ++i) {
    at::Tensor& param = params_[i].second;
    const at::Tensor& grad = param.grad();
    const at::Tensor* copy = copies.empty() ? nullptr : &copies[i];
    const bool fused = grad.defined() && Fusable(param) && Fusable(grad) && Fusable(exp_avg_[i]) &&
                       Fusable(exp_avg_sq_[i]) &&
                       (copy == nullptr || (Fusable(copies[i]) && Fusable(copies[n + i]) &&
                                            Fusable(copies[2 * n + i])));
    if (fused) {
      float* p = param.data_ptr<float>();
      const float* g = grad.data_ptr<float>();
      float* m = exp_avg_[i].data_ptr<float>();
      float* v = exp_avg_sq_[i].data_ptr<float>();
      float* cp = copy ? copies[i].data_ptr<float>() : nullptr;
      float* cm = copy ? copies[n + i].data_ptr<float>() : nullptr;
      float* cv = copy ? copies[2 * n + i].data_ptr<float>() : nullptr;
      // Element-wise: any split over the threads gives the same bits.
      at::parallel_for(0, param.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
        AdamWCopies into;
        if (cp != nullptr) into = {cp + begin, cm + begin, cv + begin};
        AdamWUpdate(p + begin, g + begin, m + begin, v + begin, end - begin, scalars, into);
      });
      continue;
    }
    if (grad.defined()) {  // double (the unit tests' reference), CUDA, or a strided layout
      param.mul_(1 - lr * options_.weight_decay);
      exp_avg_[i].mul_(beta1).add_(grad, 1 - beta1);
      exp_avg_sq_[i].mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      const at::Tensor denom = (exp_avg_sq_[i].sqrt() / bias_correction2_sqrt).add_(options_.eps);
      param.addcdiv_(exp_avg_[i], denom, -step_size);
    }
    if (copy != nullptr) {  // skipped parameters too: a snapshot holds the whole state
      copies[i].copy_(param);
      copies[n + i].copy_(exp_avg_[i]);
      copies[2 * n + i].copy_(exp_avg_sq_[i]);
    }
  }
}

std::vector<std::pair<std::string, at::Tensor>> AdamW::StateDict() const {
  std::vector<std::pair<std::string, at::Tensor>> state;
  state.emplace_back("step", torch::tensor(step_, torch::kInt64));
  for (size_t i = 0; i < params_.size(); ++i) {
    state.emplace_back("exp_avg." + params_[i].first, exp_avg_[i]);
    state.emplace_back("exp_avg_sq." + params_[i].first, exp_avg_sq_[i]);
  }
  return state;
}

absl::Status AdamW::LoadStateDict(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  std::vector<std::string> problems;
  auto take = [&](const std::string& name, const at::Tensor& like, at::Tensor& into) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      problems.push_back(absl::StrCat("missing '", name, "'"));
      return;
    }
    if (it->second.sizes() != like.sizes()) {
      problems.push_back(absl::StrCat("'", name, "' has shape ", c10::str(it->second.sizes()),
                                      ", expected ", c10::str(like.sizes())));
    } else {
      torch::NoGradGuard no_grad;
      into.copy_(it->second);
    }
    by_name.erase(it);
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    take("exp_avg." + params_[i].first, params_[i].second, exp_avg_[i]);
    take("exp_avg_sq." + params_[i].first, params_[i].second, exp_avg_sq_[i]);
  }
  auto step_it = by_name.find("step");
  if (step_it == by_name.end() || step_it->second.numel() != 1) {
    problems.push_back("missing 'step'");
  } else {
    step_ = step_it->second.item<int64_t>();
    by_name.erase(step_it);
  }
  for (const auto& [name, t] : by_name) problems.push_back(absl::StrCat("unexpected '", name, "'"));
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state does not match the model: ", absl::StrJoin(problems, "; ")));
  }
  return absl::OkStatus();
}

}  // namespace ringtrain
