// Plain softmax attention (the full L × L score matrix, PyTorch autograd): the independent
// reference the tiled and the ring kernels are checked against. Header-only, for the unit tests.
#ifndef RINGTRAIN_TESTS_UNIT_REFERENCE_ATTENTION_H_
#define RINGTRAIN_TESTS_UNIT_REFERENCE_ATTENTION_H_

#include <torch/torch.h>

#include <limits>
#include <vector>

namespace ringtrain {

// q (B, H, Lq, D), k/v (B, Hk, Lk, D). Expands K/V over the query heads (repeat_interleave,
// torchtitan's repeat_kv order), masks keys after the query when `causal`, softmax, weights V.
inline torch::Tensor ReferenceAttention(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const std::vector<int64_t>& q_pos,
                                        const std::vector<int64_t>& k_pos, bool causal,
                                        double scale) {
  const int64_t group = q.size(1) / k.size(1);
  const auto ke = k.repeat_interleave(group, 1);
  const auto ve = v.repeat_interleave(group, 1);
  auto scores = torch::matmul(q, ke.transpose(-1, -2)) * scale;
  if (causal) {
    const auto qp = torch::tensor(q_pos).view({-1, 1});
    const auto kp = torch::tensor(k_pos).view({1, -1});
    scores = scores.masked_fill(kp > qp, -std::numeric_limits<double>::infinity());
  }
  return torch::matmul(torch::softmax(scores, -1), ve);
}

}  // namespace ringtrain

#endif  // RINGTRAIN_TESTS_UNIT_REFERENCE_ATTENTION_H_
