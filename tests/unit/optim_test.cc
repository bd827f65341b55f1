// AdamW, gradient clipping and the LR schedule against independent scalar computations.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

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
