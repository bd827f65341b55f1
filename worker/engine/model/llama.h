// The Llama 3 decoder, torchtitan's math and parameter names. Pure model: how it is split across
// ranks is applied from outside (SetAttentionPlan, SetParamSource); nothing here knows about
// parallelism. The modules own the parameters; their forwards take the weights to use explicitly
// (the model's own, or a ParamSource's), so a source and activation checkpointing plug in per unit.
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
#include <string>
#include <utility>
#include <vector>

#include "worker/engine/kernels/tiled_attention.h"
#include "worker/engine/model/attention_plan.h"
#include "worker/engine/model/model_args.h"
#include "worker/engine/model/param_source.h"
#include "worker/engine/model/rope.h"

namespace ringtrain {

// RMSNorm computed in float32: x · rsqrt(mean(x²) + eps), cast back, times weight (in x's dtype).
// `fused`: the fused CPU block (fused_blocks.h) where it applies, else the ATen chain.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, c10::Device device = c10::kCPU);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, bool fused);  // weight (C,)
  const at::Tensor& weight() const { return weight_; }

 private:
  double eps_;
  at::Tensor weight_;
};
TORCH_MODULE(RMSNorm);

// A module holding one parameter, "weight", of `shape` (a projection's (out, in), the embedding's
// (V, C)): allocated on `device` but not initialised (TransformerImpl::init_weights does that) — on
// the meta device it holds no memory, for a model whose weights live in shards (FSDP).
class WeightImpl : public torch::nn::Module {
 public:
  WeightImpl(std::vector<int64_t> shape, c10::Device device);
  at::Tensor weight;
};
TORCH_MODULE(Weight);

// Everything one forward needs besides the activations: shared by all layers of a call.
struct ForwardContext {
  const RotaryTables* rope;                 // must outlive the call
  at::Tensor positions;                     // (L,) int64, the tokens' global positions
  BlockPositions host_positions;            // the same, on the host
  AttentionPlan* attention;                 // must outlive the call
  AttentionMemo* attention_memo = nullptr;  // selective "op" checkpointing only (AttentionMemo)
  bool fused_blocks = true;                 // TransformerImpl::SetFusedBlocks
};

// The weights a module's forward uses: its own parameters or a ParamSource's, float32 or already
// in the compute dtype (each is cast to the activations' dtype where it is used).
struct AttentionWeights {
  at::Tensor wq, wk, wv, wo;
};
struct FeedForwardWeights {
  at::Tensor w1, w2, w3;
};
struct BlockWeights {
  AttentionWeights attention;
  FeedForwardWeights feed_forward;
  at::Tensor attention_norm, ffn_norm;
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelArgs& args, c10::Device device);
  // (B, L, C) → (B, L, C)
  at::Tensor forward(const at::Tensor& x, const AttentionWeights& w, const ForwardContext& ctx);

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
  Weight wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
};
TORCH_MODULE(Attention);

class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t dim, int64_t hidden_dim, c10::Device device);
  // w2(silu(w1 x) · w3 x); `fused` as RMSNormImpl's.
  at::Tensor forward(const at::Tensor& x, const FeedForwardWeights& w, bool fused);

 private:
  Weight w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(int64_t layer_id, const ModelArgs& args, c10::Device device);
  at::Tensor forward(const at::Tensor& x, const BlockWeights& w, const ForwardContext& ctx);

 private:
  int64_t layer_id_;
  Attention attention{nullptr};
  FeedForward feed_forward{nullptr};
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
};
TORCH_MODULE(TransformerBlock);

// One unit's parameters (param_source.h): (full name as in named_parameters(), parameter).
using UnitParameters = std::vector<std::pair<std::string, at::Tensor>>;

// Own it through the Transformer holder (a shared_ptr): a checkpointed block's backward holds the
// model, so a backward pass can never outlive it.
class TransformerImpl : public torch::nn::Module {
 public:
  // `materialize` false puts the parameters on the meta device (no memory): for FSDP, whose shards
  // are made and initialised by each rank (Fsdp::Create with an initializer).
  explicit TransformerImpl(const ModelArgs& args, bool materialize = true);

  // tokens (B, L) int64 at `positions` (L,) → logits (B, L, V) float32.
  at::Tensor forward(const at::Tensor& tokens, const BlockPositions& positions);
  // The summed token cross-entropy against `labels` (B, L) int64 (kIgnoreLabel left out), a
  // scalar: forward and the loss without the logits when the loss is chunked (SetChunkedLoss,
  // chunked_loss.h; float64), else forward() then F.cross_entropy (float32).
  at::Tensor Loss(const at::Tensor& tokens, const BlockPositions& positions,
                  const at::Tensor& labels);

  // The units of param_source.h in forward order: 0 = tok_embeddings, 1 … n_layers = the blocks,
  // n_layers + 1 = the final norm and the output projection (the norm alone with tied embeddings:
  // the head gathers unit 0 again); each in named_parameters() order.
  std::vector<UnitParameters> Units();

  // torchtitan's init from `seed` (initial_values.h: each element a function of the seed, the
  // parameter's name and its index). Materialized models only.
  void init_weights(uint64_t seed);
  // Whether the parameters are on the meta device (not materialized).
  bool materialized() const { return materialized_; }
  // Moves parameters (when materialized) and the RoPE tables to `device`.
  using torch::nn::Module::to;
  void to(torch::Device device, bool non_blocking = false) override;
  // The attention plan; the default is LocalAttentionPlan. Applied once, before training.
  void SetAttentionPlan(std::shared_ptr<AttentionPlan> plan) { attention_plan_ = std::move(plan); }
  // Mixed precision (training.mixed_precision_param): parameters stay float32 (the optimizer's
  // master weights); the forward casts them to `dtype` where they are used (embedding output,
  // projections, norm weights), so activations and their gradients are `dtype`, parameter gradients
  // float32. RMSNorm statistics, RoPE, attention merges and the logits stay float32.
  void SetComputeDtype(c10::ScalarType dtype) { compute_dtype_ = dtype; }
  c10::ScalarType compute_dtype() const { return compute_dtype_; }
  // Where each unit's forward takes its weights from (null: the registered parameters): it
  // gathers them before the unit and gets the unit's output after it. Applied once, before
  // training.
  void SetParamSource(std::shared_ptr<ParamSource> source) { source_ = std::move(source); }
  // Activation checkpointing (ActivationCheckpointEvery): 0 none; N > 0 checkpoints block
  // `layer_id` when layer_id % N == 0 (1: every block); -1 every block, keeping each attention's
  // output and log-sum-exp (selective "op"). A checkpointed block keeps only its input: its
  // forward runs without autograd (its Gather and AfterForward too, recompute = false), and its
  // backward gathers the weights again (recompute = true), reruns the forward with autograd and
  // back-propagates through it — bitwise the same gradients. Only when grad mode is on.
  void SetActivationCheckpoint(int64_t every) { checkpoint_every_ = every; }
  // The fused CPU blocks (fused_blocks.h) for RMSNorm, RoPE and SwiGLU where they apply (CPU
  // activations in float32 or bfloat16): on by default; off runs the ATen chains everywhere.
  void SetFusedBlocks(bool on) { fused_blocks_ = on; }
  bool fused_blocks() const { return fused_blocks_; }
  // Loss() through the chunked head (chunked_loss.h): on by default; off holds the whole logits.
  void SetChunkedLoss(bool on) { chunked_loss_ = on; }
  const ModelArgs& args() const { return args_; }

 private:
  bool Checkpointed(int64_t layer_id) const;
  // The embedding and the blocks: tokens → h (B, L, C) in the compute dtype.
  at::Tensor Trunk(const at::Tensor& tokens, const BlockPositions& positions);
  // The final norm of h, and the output projection's weight (V, C) (the embedding's when tied).
  std::pair<at::Tensor, at::Tensor> Head(const at::Tensor& h);
  // The unit's weights, from the source or the registered parameters, and its output as the
  // source returns it.
  std::vector<at::Tensor> Gather(int64_t unit, bool recompute);
  at::Tensor AfterForward(int64_t unit, const at::Tensor& output, bool recompute);
  // Block `layer_id` (unit layer_id + 1) on x (B, L, C), from gathering its weights to
  // AfterForward.
  at::Tensor RunBlock(int64_t layer_id, const at::Tensor& x, const ForwardContext& ctx,
                      bool recompute);
  // RunBlock inside a checkpoint (SetActivationCheckpoint).
  at::Tensor CheckpointBlock(int64_t layer_id, const at::Tensor& x, const ForwardContext& ctx);

  ModelArgs args_;
  RotaryTables rope_;
  std::shared_ptr<AttentionPlan> attention_plan_;
  std::shared_ptr<ParamSource> source_;
  c10::ScalarType compute_dtype_ = c10::ScalarType::Float;
  int64_t checkpoint_every_ = 0;
  bool fused_blocks_ = true;
  bool chunked_loss_ = true;
  bool materialized_ = true;
  Weight tok_embeddings{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  Weight output{nullptr};  // null with tied embeddings
};
TORCH_MODULE(Transformer);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_LLAMA_H_
