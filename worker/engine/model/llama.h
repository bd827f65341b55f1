// The Llama 3 decoder, torchtitan's math and parameter names. Pure model: how it is split across
// ranks is applied from outside (SetAttentionKernel); nothing here knows about parallelism.
//
// Dimension letters: B batch, L local sequence length, C = dim, H / Hk query / kv heads,
// D head dim, F FFN hidden size, V vocabulary.
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_LLAMA_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_LLAMA_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <memory>

#include "worker/engine/kernels/tiled_attention.h"
#include "worker/engine/model/attention_kernel.h"
#include "worker/engine/model/model_args.h"
#include "worker/engine/model/rope.h"

namespace ringtrain {

// RMSNorm computed in float32: x · rsqrt(mean(x²) + eps), cast back, times weight (in x's dtype).
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);
  void reset_parameters();

 private:
  double eps_;
  at::Tensor weight_;
};
TORCH_MODULE(RMSNorm);

// Everything one forward needs besides the activations: shared by all layers of a call.
struct ForwardContext {
  const RotaryTables* rope;         // must outlive the call
  at::Tensor positions;             // (L,) int64, the tokens' global positions
  BlockPositions host_positions;    // the same, on the host
  AttentionKernel* kernel;          // must outlive the call
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelArgs& args);
  at::Tensor forward(const at::Tensor& x, const ForwardContext& ctx);  // (B, L, C) → (B, L, C)
  void init_weights(double init_std);

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
  torch::nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
};
TORCH_MODULE(Attention);

class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t dim, int64_t hidden_dim);
  at::Tensor forward(const at::Tensor& x);  // w2(silu(w1 x) · w3 x)
  void init_weights(double init_std);

 private:
  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(int64_t layer_id, const ModelArgs& args);
  at::Tensor forward(const at::Tensor& x, const ForwardContext& ctx);
  // torchtitan's depth init: output projections get std 0.02 / sqrt(2·(layer_id + 1)).
  void init_weights();

 private:
  int64_t layer_id_;
  Attention attention{nullptr};
  FeedForward feed_forward{nullptr};
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
};
TORCH_MODULE(TransformerBlock);

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const ModelArgs& args);

  // tokens (B, L) int64 at `positions` (L,) → logits (B, L, V) float32.
  at::Tensor forward(const at::Tensor& tokens, const BlockPositions& positions);

  // torchtitan's init, drawn from the global torch generator (seed it first for determinism).
  void init_weights();
  // Moves parameters and the RoPE tables to `device`.
  using torch::nn::Module::to;
  void to(torch::Device device, bool non_blocking = false) override;
  // The attention plan; the default is LocalAttentionKernel. Applied once, before training.
  void SetAttentionKernel(std::shared_ptr<AttentionKernel> kernel) { kernel_ = std::move(kernel); }
  // Mixed precision (training.mixed_precision_param): parameters stay float32 (the optimizer's
  // master weights); the forward casts them to `dtype` where they are used (embedding output,
  // projections, norm weights), so activations and their gradients are `dtype`, parameter gradients
  // float32. RMSNorm statistics, RoPE, attention merges and the logits stay float32.
  void SetComputeDtype(c10::ScalarType dtype) { compute_dtype_ = dtype; }
  c10::ScalarType compute_dtype() const { return compute_dtype_; }
  const ModelArgs& args() const { return args_; }

 private:
  ModelArgs args_;
  RotaryTables rope_;
  std::shared_ptr<AttentionKernel> kernel_;
  c10::ScalarType compute_dtype_ = c10::ScalarType::Float;
  torch::nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  torch::nn::Linear output{nullptr};
};
TORCH_MODULE(Transformer);

// PyTorch's trunc_normal_: normal(0, std) truncated to [a, b] by inverse-CDF sampling.
void TruncNormal_(at::Tensor& t, double std, double a, double b);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_LLAMA_H_
