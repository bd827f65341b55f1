// Llama 3 shape arithmetic, torch-free: the FFN hidden size and every parameter's name and shape
// (torchtitan's names), so shapes can be checked for configs too large to build (8B).
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_MODEL_ARGS_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_MODEL_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/config/job_config.h"

namespace ringtrain {

// RoPE frequency scaling (model.rope_type and its keys; rope.h).
struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelArgs {
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;
  int64_t explicit_head_dim = 0;  // model.head_dim; 0 = dim / n_heads
  int64_t intermediate_size = 0;  // 0 = from multiple_of
  int64_t multiple_of = 1;
  std::optional<double> ffn_dim_multiplier;
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;  // the output projection is tok_embeddings.weight
  int64_t max_seq_len = 0;

  static ModelArgs FromConfig(const ModelSection& model);
  // HeadDim and FfnHiddenDim of common/config/model_shape.h.
  int64_t head_dim() const;
  int64_t ffn_hidden_dim() const;
};

using ParameterShape = std::pair<std::string, std::vector<int64_t>>;

// Every parameter in torchtitan's registration order: tok_embeddings, then per layer
// attention.{wq,wk, wv,wo}, feed_forward.{w1,w2,w3}, attention_norm, ffn_norm; then norm, output
// (not with tied embeddings: tok_embeddings is the output projection too).
std::vector<ParameterShape> ParameterShapes(const ModelArgs& args);
int64_t ParameterCount(const ModelArgs& args);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_MODEL_ARGS_H_
