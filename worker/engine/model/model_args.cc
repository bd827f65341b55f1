#include "worker/engine/model/model_args.h"

namespace ringtrain {

ModelArgs ModelArgs::FromConfig(const ModelSection& m) {
  ModelArgs a;
  a.dim = m.dim;
  a.n_layers = m.n_layers;
  a.n_heads = m.n_heads;
  a.n_kv_heads = m.n_kv_heads;
  a.vocab_size = m.vocab_size;
  a.multiple_of = m.multiple_of;
  a.ffn_dim_multiplier = m.ffn_dim_multiplier;
  a.norm_eps = m.norm_eps;
  a.rope_theta = m.rope_theta;
  a.max_seq_len = m.max_seq_len;
  return a;
}

int64_t ModelArgs::ffn_hidden_dim() const {
  // Python: hidden = int(2 * hidden / 3) with hidden = 4 * dim; int() truncates toward zero.
  int64_t hidden = static_cast<int64_t>(2.0 * static_cast<double>(4 * dim) / 3.0);
  if (ffn_dim_multiplier) hidden = static_cast<int64_t>(*ffn_dim_multiplier * hidden);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

std::vector<ParameterShape> ParameterShapes(const ModelArgs& a) {
  const int64_t hd = a.head_dim(), hidden = a.ffn_hidden_dim();
  std::vector<ParameterShape> shapes = {{"tok_embeddings.weight", {a.vocab_size, a.dim}}};
  for (int64_t i = 0; i < a.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    shapes.push_back({p + "attention.wq.weight", {a.n_heads * hd, a.dim}});
    shapes.push_back({p + "attention.wk.weight", {a.n_kv_heads * hd, a.dim}});
    shapes.push_back({p + "attention.wv.weight", {a.n_kv_heads * hd, a.dim}});
    shapes.push_back({p + "attention.wo.weight", {a.dim, a.n_heads * hd}});
    shapes.push_back({p + "feed_forward.w1.weight", {hidden, a.dim}});
    shapes.push_back({p + "feed_forward.w2.weight", {a.dim, hidden}});
    shapes.push_back({p + "feed_forward.w3.weight", {hidden, a.dim}});
    shapes.push_back({p + "attention_norm.weight", {a.dim}});
    shapes.push_back({p + "ffn_norm.weight", {a.dim}});
  }
  shapes.push_back({"norm.weight", {a.dim}});
  shapes.push_back({"output.weight", {a.vocab_size, a.dim}});
  return shapes;
}

int64_t ParameterCount(const ModelArgs& args) {
  int64_t total = 0;
  for (const auto& [name, shape] : ParameterShapes(args)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    total += n;
  }
  return total;
}

}  // namespace ringtrain
