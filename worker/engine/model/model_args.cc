#include "worker/engine/model/model_args.h"

#include "common/config/model_shape.h"

namespace ringtrain {

ModelArgs ModelArgs::FromConfig(const ModelSection& m) {
  ModelArgs a;
  a.dim = m.dim;
  a.n_layers = m.n_layers;
  a.n_heads = m.n_heads;
  a.n_kv_heads = m.n_kv_heads;
  a.vocab_size = m.vocab_size;
  a.explicit_head_dim = m.head_dim;
  a.intermediate_size = m.intermediate_size;
  a.multiple_of = m.multiple_of;
  a.ffn_dim_multiplier = m.ffn_dim_multiplier;
  a.norm_eps = m.norm_eps;
  a.rope_theta = m.rope_theta;
  a.rope_scaling = {m.rope_type, m.rope_factor, m.rope_low_freq_factor, m.rope_high_freq_factor,
                    m.rope_original_max_position_embeddings};
  a.tie_word_embeddings = m.tie_word_embeddings;
  a.max_seq_len = m.max_seq_len;
  return a;
}

namespace {
ModelSection ShapeSection(const ModelArgs& a) {
  ModelSection m;
  m.dim = a.dim;
  m.n_heads = a.n_heads;
  m.head_dim = a.explicit_head_dim;
  m.intermediate_size = a.intermediate_size;
  m.multiple_of = a.multiple_of;
  m.ffn_dim_multiplier = a.ffn_dim_multiplier;
  return m;
}
}  // namespace

int64_t ModelArgs::head_dim() const { return HeadDim(ShapeSection(*this)); }
int64_t ModelArgs::ffn_hidden_dim() const { return FfnHiddenDim(ShapeSection(*this)); }

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
  if (!a.tie_word_embeddings) shapes.push_back({"output.weight", {a.vocab_size, a.dim}});
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
