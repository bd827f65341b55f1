// Hugging Face's LlamaForCausalLM state dict ⇄ ours (torchtitan's names), as torchtitan's state
// dict adapter does it:
//
//   tok_embeddings.weight                 model.embed_tokens.weight
//   layers.N.attention.wq / wk / wv / wo  model.layers.N.self_attn.q_proj / k_proj / v_proj /
//   o_proj layers.N.feed_forward.w1 / w2 / w3    model.layers.N.mlp.gate_proj / down_proj / up_proj
//   layers.N.attention_norm / ffn_norm    model.layers.N.input_layernorm / post_attention_layernorm
//   norm.weight                           model.norm.weight
//   output.weight                         lm_head.weight (absent with tied embeddings)
//
// RoPE layouts differ: ours rotates interleaved pairs (x[2i], x[2i+1]) of each head, Hugging Face
// rotates halves (x[i], x[i + D/2]). The same model has the rows of wq and wk permuted within each
// head: Hugging Face's row i < D/2 is our row 2i, its row D/2 + i our row 2i + 1.
#ifndef RINGTRAIN_WORKER_ENGINE_HF_HF_ADAPTER_H_
#define RINGTRAIN_WORKER_ENGINE_HF_HF_ADAPTER_H_

#include <cstdint>
#include <string>

#include <ATen/Tensor.h>

#include "absl/status/statusor.h"
#include "worker/engine/model/model_args.h"
#include "worker/engine/serialize/state_dict_io.h"

namespace ringtrain {

// Our parameter name → Hugging Face's, and how many heads its rows hold when they are
// RoPE-permuted (wq: n_heads, wk: n_kv_heads; 0 for every other tensor).
struct HfName {
  std::string name;
  int64_t rope_heads = 0;
};
HfName ToHfName(const std::string& ours, const ModelArgs& args);

// Our row `row` of a RoPE-permuted weight is Hugging Face's row HfRowOf(row): within each head
// of `head_dim` rows, our interleaved pair (2i, 2i + 1) is their halves (i, D/2 + i).
int64_t HfRowOf(int64_t row, int64_t head_dim);

// (heads·D, C) rows per head: interleaved pairs → halves (ToHf) and back (FromHf). Exact: only
// rows move.
at::Tensor PermuteRowsToHf(const at::Tensor& weight, int64_t heads, int64_t head_dim);
at::Tensor PermuteRowsFromHf(const at::Tensor& weight, int64_t heads, int64_t head_dim);

// Our state dict (ParameterShapes order) as Hugging Face's: renamed, wq and wk permuted, the
// tensors as they are (dtype included).
StateDict ToHfStateDict(const StateDict& ours, const ModelArgs& args);

// A Hugging Face state dict as ours, in ParameterShapes order, each tensor in its stored dtype.
// Ignored: lm_head.weight when the embeddings are tied (transformers ties it on load too) and
// rotary_emb.inv_freq buffers that old exports carry. INVALID_ARGUMENT naming `source` and every
// missing, unexpected and wrongly shaped tensor (with both shapes).
absl::StatusOr<StateDict> FromHfStateDict(const StateDict& hf, const ModelArgs& args,
                                          const std::string& source);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_HF_HF_ADAPTER_H_
