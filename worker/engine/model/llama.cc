#include "worker/engine/model/llama.h"

#include <torch/torch.h>

#include <cmath>
#include <tuple>

#include "worker/engine/model/activation_checkpoint.h"
#include "worker/engine/model/brgemm_linear.h"
#include "worker/engine/model/chunked_loss.h"
#include "worker/engine/model/fused_blocks.h"
#include "worker/engine/model/initial_values.h"

namespace ringtrain {

WeightImpl::WeightImpl(std::vector<int64_t> shape, c10::Device device) {
  weight = register_parameter("weight", at::empty(shape, at::TensorOptions().device(device)));
}

namespace {
// A bias-free projection in → out: its (out, in) weight.
Weight Projection(int64_t in, int64_t out, c10::Device device) {
  return Weight(std::vector<int64_t>{out, in}, device);
}

// x · Wᵀ in the activations' dtype: under mixed precision the float32 weight is cast for the call
// (the cast is part of the graph, so its gradient arrives in float32); otherwise the weight as is.
// `fused`: on the BRGeMM GEMM where it is the float32 engine (brgemm_linear.h), else at::linear.
at::Tensor Project(const at::Tensor& weight, const at::Tensor& x, bool fused) {
  const at::Tensor w = weight.to(x.scalar_type());
  if (fused && BrgemmLinearApplies(x, w)) return BrgemmLinear(x, w);
  return at::linear(x, w);
}

// A block unit's weights, in Units() order (the order of the block's named_parameters()).
BlockWeights ToBlockWeights(const std::vector<at::Tensor>& w) {
  TORCH_CHECK(w.size() == 9, "a transformer block has 9 weights, got ", w.size());
  return {{w[0], w[1], w[2], w[3]}, {w[4], w[5], w[6]}, w[7], w[8]};
}
}  // namespace

// ---- RMSNorm ----

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, c10::Device device) : eps_(eps) {
  weight_ = register_parameter("weight", device.is_meta()
                                             ? at::empty({dim}, at::TensorOptions().device(device))
                                             : torch::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x, const at::Tensor& weight, bool fused) {
  if (fused && FusedBlocksApply(x)) return FusedRmsNorm(x, weight, eps_);
  const at::Tensor xf = x.to(torch::kFloat32);
  const at::Tensor normed = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps_);
  return normed.to(x.scalar_type()) * weight.to(x.scalar_type());
}

// ---- Attention ----

AttentionImpl::AttentionImpl(const ModelArgs& args, c10::Device device)
    : n_heads_(args.n_heads),
      n_kv_heads_(args.n_kv_heads),
      head_dim_(args.head_dim()),
      wq(Projection(args.dim, args.n_heads * args.head_dim(), device)),
      wk(Projection(args.dim, args.n_kv_heads * args.head_dim(), device)),
      wv(Projection(args.dim, args.n_kv_heads * args.head_dim(), device)),
      wo(Projection(args.n_heads * args.head_dim(), args.dim, device)) {
  register_module("wq", wq);
  register_module("wk", wk);
  register_module("wv", wv);
  register_module("wo", wo);
}

at::Tensor AttentionImpl::forward(const at::Tensor& x, const AttentionWeights& w,
                                  const ForwardContext& ctx) {
  const int64_t batch = x.size(0), length = x.size(1);
  const bool fused = ctx.fused_blocks;
  at::Tensor xq = Project(w.wq, x, fused).view({batch, length, n_heads_, head_dim_});
  at::Tensor xk = Project(w.wk, x, fused).view({batch, length, n_kv_heads_, head_dim_});
  at::Tensor xv = Project(w.wv, x, fused).view({batch, length, n_kv_heads_, head_dim_});
  // RoPE, and (B, L, heads, D) → (B, heads, L, D) for the kernel.
  at::Tensor q, k;
  if (ctx.fused_blocks && FusedBlocksApply(x)) {
    std::tie(q, k) = FusedRopeQK(xq, xk, ctx.rope->cos(), ctx.rope->sin(), ctx.positions);
  } else {
    q = ctx.rope->Apply(xq, ctx.positions).transpose(1, 2).contiguous();
    k = ctx.rope->Apply(xk, ctx.positions).transpose(1, 2).contiguous();
  }
  const at::Tensor out =
      ctx.attention->Attend(q, k, xv.transpose(1, 2).contiguous(), ctx.host_positions,
                            1.0 / std::sqrt(double(head_dim_)), ctx.attention_memo);
  return Project(w.wo, out.transpose(1, 2).reshape({batch, length, n_heads_ * head_dim_}), fused);
}

// ---- FeedForward ----

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t hidden_dim, c10::Device device)
    : w1(Projection(dim, hidden_dim, device)),
      w2(Projection(hidden_dim, dim, device)),
      w3(Projection(dim, hidden_dim, device)) {
  register_module("w1", w1);
  register_module("w2", w2);
  register_module("w3", w3);
}

at::Tensor FeedForwardImpl::forward(const at::Tensor& x, const FeedForwardWeights& w, bool fused) {
  const at::Tensor a = Project(w.w1, x, fused), b = Project(w.w3, x, fused);
  return Project(w.w2, fused && FusedBlocksApply(x) ? FusedSwiGlu(a, b) : torch::silu(a) * b,
                 fused);
}

// ---- TransformerBlock ----

TransformerBlockImpl::TransformerBlockImpl(int64_t layer_id, const ModelArgs& args,
                                           c10::Device device)
    : layer_id_(layer_id),
      attention(args, device),
      feed_forward(args.dim, args.ffn_hidden_dim(), device),
      attention_norm(args.dim, args.norm_eps, device),
      ffn_norm(args.dim, args.norm_eps, device) {
  register_module("attention", attention);
  register_module("feed_forward", feed_forward);
  register_module("attention_norm", attention_norm);
  register_module("ffn_norm", ffn_norm);
}

at::Tensor TransformerBlockImpl::forward(const at::Tensor& x, const BlockWeights& w,
                                         const ForwardContext& ctx) {
  const bool fused = ctx.fused_blocks;
  const at::Tensor h =
      x + attention->forward(attention_norm->forward(x, w.attention_norm, fused), w.attention, ctx);
  return h + feed_forward->forward(ffn_norm->forward(h, w.ffn_norm, fused), w.feed_forward, fused);
}

// ---- Transformer ----

TransformerImpl::TransformerImpl(const ModelArgs& args, bool materialize)
    : args_(args),
      rope_(args.head_dim(), args.max_seq_len, args.rope_theta, args.rope_scaling),
      attention_plan_(std::make_shared<LocalAttentionPlan>()),
      materialized_(materialize),
      tok_embeddings(std::vector<int64_t>{args.vocab_size, args.dim},
                     materialize ? c10::Device(c10::kCPU) : c10::Device(c10::kMeta)),
      layers(torch::nn::ModuleList()),
      norm(args.dim, args.norm_eps,
           materialize ? c10::Device(c10::kCPU) : c10::Device(c10::kMeta)) {
  const c10::Device device = materialize ? c10::Device(c10::kCPU) : c10::Device(c10::kMeta);
  register_module("tok_embeddings", tok_embeddings);
  for (int64_t i = 0; i < args.n_layers; ++i) layers->push_back(TransformerBlock(i, args, device));
  register_module("layers", layers);
  register_module("norm", norm);
  // Tied: the output projection is tok_embeddings.weight, one parameter (Llama 3.2 1B/3B).
  if (!args.tie_word_embeddings) {
    output = register_module("output", Projection(args.dim, args.vocab_size, device));
  }
}

at::Tensor TransformerImpl::Trunk(const at::Tensor& tokens, const BlockPositions& positions) {
  ForwardContext ctx{&rope_, positions.AsTensor().to(tokens.device()), positions,
                     attention_plan_.get()};
  ctx.fused_blocks = fused_blocks_;
  const std::vector<at::Tensor> embedding = Gather(0, /*recompute=*/false);
  // The one place the compute dtype enters: every later op follows the activations' dtype.
  at::Tensor h = AfterForward(0, at::embedding(embedding[0], tokens).to(compute_dtype_),
                              /*recompute=*/false);  // (B, L, C)
  for (int64_t layer_id = 0; layer_id < args_.n_layers; ++layer_id) {
    h = Checkpointed(layer_id) && at::GradMode::is_enabled()
            ? CheckpointBlock(layer_id, h, ctx)
            : RunBlock(layer_id, h, ctx, /*recompute=*/false);
  }
  return h;
}

std::pair<at::Tensor, at::Tensor> TransformerImpl::Head(const at::Tensor& h) {
  const std::vector<at::Tensor> head = Gather(args_.n_layers + 1, /*recompute=*/false);
  // Tied: the embedding unit's weight again (a source gathers it once more; its gradient from here
  // and from the embedding add up in the one parameter). recompute = true: nothing to prefetch.
  const at::Tensor projection =
      args_.tie_word_embeddings ? Gather(0, /*recompute=*/true)[0] : head[1];
  return {norm->forward(h, head[0], fused_blocks_), projection};
}

at::Tensor TransformerImpl::forward(const at::Tensor& tokens, const BlockPositions& positions) {
  const auto [normed, projection] = Head(Trunk(tokens, positions));
  const at::Tensor logits = Project(projection, normed, fused_blocks_).to(torch::kFloat32);
  return AfterForward(args_.n_layers + 1, logits, /*recompute=*/false);  // (B, L, V)
}

at::Tensor TransformerImpl::Loss(const at::Tensor& tokens, const BlockPositions& positions,
                                 const at::Tensor& labels) {
  const auto [normed, projection] = Head(Trunk(tokens, positions));
  at::Tensor loss;
  if (chunked_loss_) {
    loss = ChunkedCrossEntropySum(normed.flatten(0, 1), projection, labels.flatten());
  } else {
    const at::Tensor logits = Project(projection, normed, fused_blocks_).to(torch::kFloat32);
    loss = torch::nn::functional::cross_entropy(
        logits.flatten(0, 1), labels.flatten(),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  }
  return AfterForward(args_.n_layers + 1, loss, /*recompute=*/false);
}

std::vector<UnitParameters> TransformerImpl::Units() {
  std::vector<UnitParameters> units(args_.n_layers + 2);
  auto add = [](UnitParameters& unit, const std::string& prefix, const torch::nn::Module& module) {
    for (const auto& p : module.named_parameters()) unit.emplace_back(prefix + p.key(), p.value());
  };
  add(units.front(), "tok_embeddings.", *tok_embeddings);
  for (int64_t i = 0; i < args_.n_layers; ++i) {
    add(units[i + 1], "layers." + std::to_string(i) + ".", *layers[i]);
  }
  add(units.back(), "norm.", *norm);
  if (output) add(units.back(), "output.", *output);
  return units;
}

bool TransformerImpl::Checkpointed(int64_t layer_id) const {
  return checkpoint_every_ < 0 || (checkpoint_every_ > 0 && layer_id % checkpoint_every_ == 0);
}

std::vector<at::Tensor> TransformerImpl::Gather(int64_t unit, bool recompute) {
  if (source_) return source_->Gather(unit, recompute);
  if (unit == 0) return {tok_embeddings->weight};
  if (unit <= args_.n_layers) return layers[unit - 1]->parameters();
  if (!output) return {norm->weight()};
  return {norm->weight(), output->weight};
}

at::Tensor TransformerImpl::AfterForward(int64_t unit, const at::Tensor& output, bool recompute) {
  return source_ ? source_->AfterForward(unit, output, recompute) : output;
}

at::Tensor TransformerImpl::CheckpointBlock(int64_t layer_id, const at::Tensor& x,
                                            const ForwardContext& ctx) {
  // The checkpoint holds the model (hence its attention plan, source and RoPE tables), the context
  // and, for "op", the memo the first forward fills and the recompute empties. With ring attention
  // (cp > 1) the recompute exchanges K/V again: every rank recomputes the same blocks in the same
  // order (the reverse of the forward's), so the exchanges pair up as in the forward; "op" skips
  // the exchange on every rank alike.
  auto memo = checkpoint_every_ < 0 ? std::make_shared<AttentionMemo>() : nullptr;
  auto self = std::static_pointer_cast<TransformerImpl>(shared_from_this());
  return Checkpoint(
      [self, layer_id, ctx, memo](const at::Tensor& input, bool recompute) {
        ForwardContext block_ctx = ctx;
        block_ctx.attention_memo = memo.get();
        return self->RunBlock(layer_id, input, block_ctx, recompute);
      },
      x);
}

at::Tensor TransformerImpl::RunBlock(int64_t layer_id, const at::Tensor& x,
                                     const ForwardContext& ctx, bool recompute) {
  const int64_t unit = layer_id + 1;
  const BlockWeights weights = ToBlockWeights(Gather(unit, recompute));
  const at::Tensor out = layers[layer_id]->as<TransformerBlock>()->forward(x, weights, ctx);
  return AfterForward(unit, out, recompute);
}

void TransformerImpl::to(torch::Device device, bool non_blocking) {
  // Meta parameters stay where they are: their memory is FSDP's shards, made on the device.
  if (materialized_) torch::nn::Module::to(device, non_blocking);
  rope_ = rope_.To(device);
}

void TransformerImpl::init_weights(uint64_t seed) {
  TORCH_CHECK(materialized_, "init_weights on a model whose parameters are not materialized");
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters()) {
    at::Tensor& param = item.value();
    const at::Tensor values = at::empty({param.numel()}, at::kFloat);
    FillInitialValues(item.key(), args_, seed, 0, param.numel(), values);
    param.copy_(values.view(param.sizes()));
  }
}

}  // namespace ringtrain
