// Hugging Face model folders' config.json (LlamaForCausalLM) ⇄ the [model] section. Torch-free:
// the trainer resolves model.hf_assets_path with it, the export and ringtrain-convert write it.
//
// The mapping (transformers' LlamaConfig → ringtrain):
//   hidden_size → dim              num_hidden_layers → n_layers     num_attention_heads → n_heads
//   num_key_value_heads → n_kv_heads (absent: n_heads)               vocab_size → vocab_size
//   head_dim → head_dim (absent: hidden_size / heads)                intermediate_size → same
//   rms_norm_eps → norm_eps        max_position_embeddings → max_seq_len
//   tie_word_embeddings → same (absent: false)
//   rope_parameters {rope_type, rope_theta, factor, low_freq_factor, high_freq_factor,
//   original_max_position_embeddings} (transformers 5.x), or rope_theta (absent: 10000) +
//   rope_scaling {rope_type | type, …} (4.x and the Hub's Llama 3.1/3.2 files) → rope_* keys.
// Refused, naming the field: model_type other than "llama", architectures without
// LlamaForCausalLM, hidden_act other than "silu", attention_bias / mlp_bias true, a non-zero
// attention_dropout, a quantization_config, a rope type other than "default" and "llama3".
#ifndef RINGTRAIN_COMMON_CONFIG_HF_CONFIG_H_
#define RINGTRAIN_COMMON_CONFIG_HF_CONFIG_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/job_config.h"

namespace ringtrain {

// config.json's text as a model section with every architecture key set (hf_assets_path empty,
// multiple_of and ffn_dim_multiplier at their defaults: intermediate_size is explicit).
// INVALID_ARGUMENT naming `source` and the field for what cannot be read or honoured.
absl::StatusOr<ModelSection> ParseHfConfig(absl::string_view json_text, const std::string& source);

// config.json for `model` in `dtype`, as both transformers 4.x and 5.x read it: rope_theta and
// rope_scaling (4.x) and rope_parameters (5.x), torch_dtype and dtype.
std::string HfConfigJson(const ModelSection& model, MixedPrecision dtype);

// When model.hf_assets_path is set: config->model takes DIR/config.json's architecture
// (ParseHfConfig). A [model] key that the text or an override set (JobConfig::given_keys) to
// another value is refused naming both values; model.max_seq_len alone may differ (training past
// max_position_embeddings is the user's call). training.tokenizer_path becomes DIR/tokenizer.json
// when that file exists and the key is empty. The whole config is validated again. Errors are
// INVALID_ARGUMENT (a config error: the trainer exits 2) naming the file and the field. A no-op
// when hf_assets_path is empty.
absl::Status ResolveHfAssets(JobConfig* config);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_HF_CONFIG_H_
