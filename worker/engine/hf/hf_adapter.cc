#include "worker/engine/hf/hf_adapter.h"

#include <torch/torch.h>

#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ringtrain {
namespace {

std::string Shape(const std::vector<int64_t>& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

}  // namespace

HfName ToHfName(const std::string& ours, const ModelArgs& args) {
  static const std::map<std::string, std::string> kLayer = {
      {"attention.wq.weight", "self_attn.q_proj.weight"},
      {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"},
      {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"},
      {"feed_forward.w3.weight", "mlp.up_proj.weight"},
      {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"}};
  if (ours == "tok_embeddings.weight") return {"model.embed_tokens.weight"};
  if (ours == "norm.weight") return {"model.norm.weight"};
  if (ours == "output.weight") return {"lm_head.weight"};
  // layers.N.<rest>
  const size_t dot = ours.find('.', 7);
  const std::string rest = ours.substr(dot + 1);
  HfName hf{absl::StrCat("model.", ours.substr(0, dot + 1), kLayer.at(rest))};
  if (rest == "attention.wq.weight") hf.rope_heads = args.n_heads;
  if (rest == "attention.wk.weight") hf.rope_heads = args.n_kv_heads;
  return hf;
}

int64_t HfRowOf(int64_t row, int64_t head_dim) {
  const int64_t head = row / head_dim, j = row % head_dim;
  return head * head_dim + (j % 2) * (head_dim / 2) + j / 2;
}

at::Tensor PermuteRowsToHf(const at::Tensor& weight, int64_t heads, int64_t head_dim) {
  const int64_t in = weight.size(1);
  // (heads, D/2, 2, C): row 2i + j of a head → (i, j); halves order is (j, i).
  return weight.reshape({heads, head_dim / 2, 2, in})
      .transpose(1, 2)
      .reshape({heads * head_dim, in});
}

at::Tensor PermuteRowsFromHf(const at::Tensor& weight, int64_t heads, int64_t head_dim) {
  const int64_t in = weight.size(1);
  return weight.reshape({heads, 2, head_dim / 2, in})
      .transpose(1, 2)
      .reshape({heads * head_dim, in});
}

StateDict ToHfStateDict(const StateDict& ours, const ModelArgs& args) {
  StateDict hf;
  for (const auto& [name, tensor] : ours) {
    const HfName target = ToHfName(name, args);
    hf.emplace_back(target.name,
                    target.rope_heads > 0
                        ? PermuteRowsToHf(tensor, target.rope_heads, args.head_dim()).contiguous()
                        : tensor);
  }
  return hf;
}

absl::StatusOr<StateDict> FromHfStateDict(const StateDict& hf, const ModelArgs& args,
                                          const std::string& source) {
  std::map<std::string, at::Tensor> by_name(hf.begin(), hf.end());
  std::vector<std::string> missing, mis_shaped;
  StateDict ours;
  for (const auto& [name, shape] : ParameterShapes(args)) {
    const HfName target = ToHfName(name, args);
    const auto it = by_name.find(target.name);
    if (it == by_name.end()) {
      missing.push_back(target.name);
      continue;
    }
    const at::Tensor tensor = it->second;
    by_name.erase(it);
    if (tensor.sizes().vec() != shape) {
      mis_shaped.push_back(absl::StrCat(target.name, " ", Shape(tensor.sizes().vec()),
                                        " where the model has ", Shape(shape)));
      continue;
    }
    ours.emplace_back(
        name, target.rope_heads > 0
                  ? PermuteRowsFromHf(tensor, target.rope_heads, args.head_dim()).contiguous()
                  : tensor);
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, tensor] : by_name) {
    if (args.tie_word_embeddings && name == "lm_head.weight") continue;
    if (absl::EndsWith(name, "rotary_emb.inv_freq")) continue;
    unexpected.push_back(name);
  }
  if (missing.empty() && unexpected.empty() && mis_shaped.empty()) return ours;
  std::string message = absl::StrCat("Hugging Face weights ", source,
                                     " do not match the model (model.hf_assets_path or [model]):");
  if (!missing.empty()) absl::StrAppend(&message, "\n  missing: ", absl::StrJoin(missing, ", "));
  if (!unexpected.empty()) {
    absl::StrAppend(&message, "\n  unexpected: ", absl::StrJoin(unexpected, ", "));
  }
  if (!mis_shaped.empty()) {
    absl::StrAppend(&message, "\n  wrong shape: ", absl::StrJoin(mis_shaped, ", "));
  }
  return absl::InvalidArgumentError(message);
}

}  // namespace ringtrain
