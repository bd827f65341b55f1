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

struct ModelArgs {
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;
  int64_t multiple_of = 1;
  std::optional<double> ffn_dim_multiplier;
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  int64_t max_seq_len = 0;

  static ModelArgs FromConfig(const ModelSection& model);
  int64_t head_dim() const { return dim / n_heads; }
  // int(2·4·dim/3), times ffn_dim_multiplier when set, rounded up to multiple_of (torchtitan).
  int64_t ffn_hidden_dim() const;
};

using ParameterShape = std::pair<std::string, std::vector<int64_t>>;

// Every parameter in torchtitan's registration order: tok_embeddings, then per layer
// attention.{wq,wk, wv,wo}, feed_forward.{w1,w2,w3}, attention_norm, ffn_norm; then norm, output.
std::vector<ParameterShape> ParameterShapes(const ModelArgs& args);
int64_t ParameterCount(const ModelArgs& args);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_MODEL_ARGS_H_
