#include "worker/engine/model/rope.h"

#include <torch/torch.h>

#include <cmath>

namespace ringtrain {

namespace {

// transformers' _compute_llama3_parameters on θ_i `inv_freq`: wavelengths above
// original / low_freq_factor are divided by `factor`, those below original / high_freq_factor
// kept, those between interpolated. Python's `x / tensor` is tensor.reciprocal() * x and
// `1 - tensor` is rsub: the same ops here, in float32.
at::Tensor Llama3Scaled(const at::Tensor& inv_freq, const RopeScaling& s) {
  const double original = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = original / s.low_freq_factor;
  const double high_freq_wavelen = original / s.high_freq_factor;
  const at::Tensor wavelen = inv_freq.reciprocal() * (2 * M_PI);
  at::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  const at::Tensor smooth = (wavelen.reciprocal() * original - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor smoothed = torch::rsub(smooth, 1) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium = torch::logical_not(wavelen < high_freq_wavelen) *
                            torch::logical_not(wavelen > low_freq_wavelen);
  return torch::where(medium, smoothed, scaled);
}

}  // namespace

at::Tensor RotaryTables::InverseFrequencies(int64_t head_dim, double theta,
                                            const RopeScaling& scaling) {
  // Same float32 arithmetic as torchtitan's precompute_freqs_cis, so the tables agree bitwise.
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  const at::Tensor exponents =
      torch::arange(0, head_dim, 2, f32).slice(0, 0, head_dim / 2) / static_cast<double>(head_dim);
  const at::Tensor freqs = 1.0 / torch::pow(theta, exponents);
  return scaling.type == RopeType::kLlama3 ? Llama3Scaled(freqs, scaling) : freqs;
}

RotaryTables::RotaryTables(int64_t head_dim, int64_t max_seq_len, double theta,
                           const RopeScaling& scaling) {
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  const at::Tensor freqs = InverseFrequencies(head_dim, theta, scaling);
  const at::Tensor t = torch::arange(max_seq_len, f32);
  const at::Tensor angles = torch::outer(t, freqs);  // (max_seq_len, D/2)
  cos_ = angles.cos();
  sin_ = angles.sin();
}

RotaryTables RotaryTables::To(const c10::Device& device) const {
  RotaryTables moved;
  moved.cos_ = cos_.to(device);
  moved.sin_ = sin_.to(device);
  return moved;
}

at::Tensor RotaryTables::Apply(const at::Tensor& x, const at::Tensor& positions) const {
  const int64_t batch = x.size(0), length = x.size(1), heads = x.size(2), dim = x.size(3);
  TORCH_CHECK(positions.numel() == length, "RoPE: ", positions.numel(), " positions for ", length,
              " tokens");
  const at::Tensor cos = cos_.index_select(0, positions).view({1, length, 1, dim / 2});
  const at::Tensor sin = sin_.index_select(0, positions).view({1, length, 1, dim / 2});
  const at::Tensor pairs = x.to(torch::kFloat32).reshape({batch, length, heads, dim / 2, 2});
  const at::Tensor re = pairs.select(-1, 0);
  const at::Tensor im = pairs.select(-1, 1);
  // (re + i·im)(cos + i·sin)
  const at::Tensor out_re = re * cos - im * sin;
  const at::Tensor out_im = re * sin + im * cos;
  return torch::stack({out_re, out_im}, -1).flatten(3).to(x.scalar_type());
}

}  // namespace ringtrain
