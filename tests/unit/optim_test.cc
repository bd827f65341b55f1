// AdamW, gradient clipping and the LR schedule against independent scalar computations; AdamW's
// one-pass float32 update against the ATen chain and float64, at every CPU level.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "worker/engine/kernels/cpu_isa.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/optim/clip.h"
#include "worker/engine/optim/lr_schedule.h"

namespace ringtrain {
namespace {

// torch.optim.AdamW for one scalar, in double precision, written from the paper's update.
struct ScalarAdamW {
  double p, m = 0, v = 0;
  int t = 0;
  void Step(double g, double lr, const AdamWOptions& o) {
    ++t;
    p *= 1 - lr * o.weight_decay;
    m = o.beta1 * m + (1 - o.beta1) * g;
    v = o.beta2 * v + (1 - o.beta2) * g * g;
    const double m_hat = m / (1 - std::pow(o.beta1, t));
    const double denom = std::sqrt(v) / std::sqrt(1 - std::pow(o.beta2, t)) + o.eps;
    p -= lr * m_hat / denom;
  }
};

TEST(AdamWTest, MatchesScalarReferenceOverSeveralSteps) {
  const AdamWOptions o{1e-2, 0.9, 0.95, 1e-8, 0.1};
  auto w = torch::tensor({0.5, -1.25, 3.0, 0.0}, torch::kFloat64).requires_grad_();
  std::vector<ScalarAdamW> ref;
  for (int i = 0; i < 4; ++i) ref.push_back({w[i].item<double>()});
  AdamW opt({{"w", w}}, o);
  const std::vector<std::vector<double>> grads = {
      {0.1, -0.2, 0.3, 1e-9}, {0.05, 0.4, -0.3, 0.0}, {-1.0, 0.0, 2.0, 5.0}};
  const std::vector<double> lrs = {1e-2, 5e-3, 2e-2};
  for (size_t s = 0; s < grads.size(); ++s) {
    w.mutable_grad() = torch::tensor(grads[s], torch::kFloat64);
    opt.Step(lrs[s]);
    for (int i = 0; i < 4; ++i) {
      ref[i].Step(grads[s][i], lrs[s], o);
      EXPECT_NEAR(w[i].item<double>(), ref[i].p, 1e-13) << "step " << s << " element " << i;
    }
  }
  EXPECT_EQ(opt.step_count(), 3);
}

// torch.optim.AdamW's single-tensor update as the ATen chain it runs (the float32 reference).
void ChainStep(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, int64_t t,
               double lr, const AdamWOptions& o) {
  torch::NoGradGuard no_grad;
  p.mul_(1 - lr * o.weight_decay);
  m.mul_(o.beta1).add_(g, 1 - o.beta1);
  v.mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
  const double bc2_sqrt = std::sqrt(1 - std::pow(o.beta2, double(t)));
  const at::Tensor denom = (v.sqrt() / bc2_sqrt).add_(o.eps);
  p.addcdiv_(m, denom, -lr / (1 - std::pow(o.beta1, double(t))));
}

// Odd, and more than two of the update's 65536-element thread chunks.
constexpr int64_t kElements = 2 * 65536 + 4099;

struct AdamWState {
  at::Tensor p, m, v;
};

// `steps` AdamW updates of a float32 parameter from fixed values and gradients.
AdamWState Fused(int steps, const AdamWOptions& o) {
  torch::manual_seed(7);
  at::Tensor w = torch::randn({kElements}).requires_grad_();
  AdamW opt({{"w", w}}, o);
  for (int t = 1; t <= steps; ++t) {
    w.mutable_grad() = torch::randn({kElements}) * (t % 2 == 0 ? 1e-3 : 2.0);
    opt.Step(1e-2 / t);
  }
  return {w.detach().clone(), opt.exp_avg()[0].clone(), opt.exp_avg_sq()[0].clone()};
}

TEST(AdamWTest, OnePassFloat32AgreesWithTheAtenChainAndIsNoFurtherFromFloat64) {
  const AdamWOptions o{1e-2, 0.9, 0.95, 1e-8, 0.1};
  const int steps = 6;
  const AdamWState fused = Fused(steps, o);
  // The same values and gradients through the ATen chain in float32 and in float64.
  torch::manual_seed(7);
  at::Tensor p32 = torch::randn({kElements}), p64 = p32.to(torch::kFloat64);
  at::Tensor m32 = torch::zeros_like(p32), v32 = torch::zeros_like(p32);
  at::Tensor m64 = torch::zeros_like(p64), v64 = torch::zeros_like(p64);
  for (int t = 1; t <= steps; ++t) {
    const at::Tensor g = torch::randn({kElements}) * (t % 2 == 0 ? 1e-3 : 2.0);
    ChainStep(p32, g, m32, v32, t, 1e-2 / t, o);
    ChainStep(p64, g.to(torch::kFloat64), m64, v64, t, 1e-2 / t, o);
  }
  auto max_error = [&](const at::Tensor& a, const at::Tensor& exact) {
    return (a.to(torch::kFloat64) - exact).abs().max().item<double>();
  };
  // Element-wise within a few ulps of the terms' size (an element near 0 is a cancellation).
  const double ulp = std::ldexp(1.0, -23);
  for (const auto& [ours, aten] : {std::pair{fused.p, p32}, {fused.m, m32}, {fused.v, v32}}) {
    const double scale = aten.abs().max().item<double>();
    const double gap = (ours - aten).abs().max().item<double>();
    EXPECT_LE(gap, 8 * ulp * scale) << "largest difference " << gap << " at scale " << scale;
  }
  // As close to the float64 update as PyTorch's own float32 chain is (within an ulp's slack).
  EXPECT_LE(max_error(fused.p, p64),
            max_error(p32, p64) + 4 * ulp * p64.abs().max().item<double>());
  EXPECT_LE(max_error(fused.m, m64),
            max_error(m32, m64) + 4 * ulp * m64.abs().max().item<double>());
  EXPECT_LE(max_error(fused.v, v64),
            max_error(v32, v64) + 4 * ulp * v64.abs().max().item<double>());
}

TEST(AdamWTest, OnePassUpdateIsBitwiseTheSameAtEveryCpuLevelAndThreadCount) {
  const AdamWOptions o{1e-2, 0.9, 0.95, 1e-8, 0.1};
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const AdamWState reference = Fused(4, o);
  at::set_num_threads(threads);
  for (CpuIsa isa : AvailableCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    ScopedCpuIsa level(isa);
    for (int n : {1, 2}) {
      at::set_num_threads(n);
      const AdamWState run = Fused(4, o);
      EXPECT_TRUE(torch::equal(run.p, reference.p)) << n << " threads";
      EXPECT_TRUE(torch::equal(run.m, reference.m)) << n << " threads";
      EXPECT_TRUE(torch::equal(run.v, reference.v)) << n << " threads";
    }
  }
  at::set_num_threads(threads);
}

TEST(AdamWTest, CopiesReceiveTheUpdatedStateOfEveryParameter) {
  torch::manual_seed(3);
  at::Tensor a = torch::randn({kElements}).requires_grad_();
  at::Tensor b = torch::randn({3, 5}).requires_grad_();  // no gradient: skipped, still copied
  at::Tensor twin_a = a.detach().clone().requires_grad_(), twin_b = b.detach().clone();
  AdamW opt({{"a", a}, {"b", b}}, {});
  AdamW twin({{"a", twin_a}}, {});
  for (int t = 1; t <= 3; ++t) {
    const at::Tensor g = torch::randn({kElements});
    a.mutable_grad() = g;
    twin_a.mutable_grad() = g.clone();
    std::vector<at::Tensor> copies;  // the parameters', then exp_avg's, then exp_avg_sq's
    for (int k = 0; k < 3; ++k) {
      copies.push_back(torch::full({kElements}, -1.0f));
      copies.push_back(torch::full({3, 5}, -1.0f));
    }
    opt.Step(1e-3, copies);
    twin.Step(1e-3);
    EXPECT_TRUE(torch::equal(a, twin_a)) << "a copy changes nothing in the update";
    EXPECT_TRUE(torch::equal(b, twin_b));
    EXPECT_TRUE(torch::equal(copies[0], a.detach()));
    EXPECT_TRUE(torch::equal(copies[1], b.detach()));
    EXPECT_TRUE(torch::equal(copies[2], opt.exp_avg()[0]));
    EXPECT_TRUE(torch::equal(copies[3], opt.exp_avg()[1]));
    EXPECT_TRUE(torch::equal(copies[4], opt.exp_avg_sq()[0]));
    EXPECT_TRUE(torch::equal(copies[5], opt.exp_avg_sq()[1]));
  }
  EXPECT_THROW(opt.Step(1e-3, {torch::zeros({kElements})}), c10::Error);
}

TEST(AdamWTest, StateDictRoundTripAndMismatchErrors) {
  auto w = torch::ones({3}).requires_grad_();
  AdamW opt({{"w", w}}, {});
  w.mutable_grad() = torch::full({3}, 0.5);
  opt.Step(1e-3);
  auto state = opt.StateDict();
  auto w2 = torch::ones({3}).requires_grad_();
  AdamW opt2({{"w", w2}}, {});
  ASSERT_TRUE(opt2.LoadStateDict(state).ok());
  EXPECT_EQ(opt2.step_count(), 1);
  state.emplace_back("exp_avg.extra", torch::zeros({1}));
  state[1].second = torch::zeros({4});
  const absl::Status bad = opt2.LoadStateDict(state);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("exp_avg.extra"), std::string::npos) << bad;
  EXPECT_NE(bad.message().find("shape"), std::string::npos) << bad;
}

TEST(ClipTest, GlobalNormAndScaling) {
  auto a = torch::zeros({2}).requires_grad_();
  auto b = torch::zeros({1}).requires_grad_();
  a.mutable_grad() = torch::tensor({3.0f, 4.0f});
  b.mutable_grad() = torch::tensor({12.0f});
  const double norm = ClipGradNorm({a, b}, 1.0);
  EXPECT_NEAR(norm, 13.0, 1e-6);  // sqrt(9 + 16 + 144)
  const double coef = 1.0 / (13.0 + 1e-6);
  EXPECT_NEAR(a.grad()[0].item<double>(), 3 * coef, 1e-7);
  EXPECT_NEAR(b.grad()[0].item<double>(), 12 * coef, 1e-7);
  // Below max_norm nothing changes.
  EXPECT_NEAR(ClipGradNorm({a, b}, 10.0), 1.0, 1e-5);
  EXPECT_NEAR(a.grad()[0].item<double>(), 3 * coef, 1e-7);
}

TEST(LrScheduleTest, WarmupStableCosineDecay) {
  LrSchedule s({1.0, 100, 10, 0.2, DecayType::kCosine, 0.1});
  EXPECT_EQ(s.decay_steps(), 20);
  EXPECT_DOUBLE_EQ(s.FactorAt(1), 0.1);
  EXPECT_DOUBLE_EQ(s.FactorAt(10), 1.0);
  EXPECT_DOUBLE_EQ(s.FactorAt(80), 1.0);
  EXPECT_NEAR(s.FactorAt(90), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.5)), 1e-15);
  EXPECT_NEAR(s.FactorAt(100), 0.1, 1e-15);
}

TEST(LrScheduleTest, LinearDecayAndConstant) {
  LrSchedule linear({2.0, 10, 0, 0.5, DecayType::kLinear, 0.0});
  EXPECT_DOUBLE_EQ(linear.LrAt(5), 2.0);
  EXPECT_DOUBLE_EQ(linear.LrAt(6), 2.0 * 0.8);
  EXPECT_DOUBLE_EQ(linear.LrAt(10), 0.0);
  LrSchedule constant({3e-4, 7, 0, 0.0, DecayType::kLinear, 0.0});
  for (int k = 1; k <= 7; ++k) EXPECT_DOUBLE_EQ(constant.LrAt(k), 3e-4);
}

TEST(LrScheduleTest, PhasesLongerThanTheRunAreClamped) {
  // Warmup 200 over a 10-step run: clamped to 10, so the run ends at the full rate.
  LrSchedule warmup({1.0, 10, 200, 0.0, DecayType::kLinear, 0.0});
  EXPECT_DOUBLE_EQ(warmup.FactorAt(1), 0.1);
  EXPECT_DOUBLE_EQ(warmup.FactorAt(10), 1.0);
  // Warmup 8 and round(10 × 0.5) = 5 decay steps: decay shortened to 2 (steps 9 and 10).
  LrSchedule decay({1.0, 10, 8, 0.5, DecayType::kLinear, 0.0});
  EXPECT_EQ(decay.decay_steps(), 2);
  EXPECT_DOUBLE_EQ(decay.FactorAt(8), 1.0);
  EXPECT_DOUBLE_EQ(decay.FactorAt(9), 0.5);
  EXPECT_DOUBLE_EQ(decay.FactorAt(10), 0.0);
}

}  // namespace
}  // namespace ringtrain
