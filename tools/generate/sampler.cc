#include "tools/generate/sampler.h"

#include <torch/torch.h>

#include <memory>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "worker/engine/model/kv_cache_plan.h"

namespace ringtrain {
namespace {

// logits (V,) float32 → the next id.
int64_t NextToken(const at::Tensor& logits, const SamplingOptions& o, at::Generator& generator) {
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  at::Tensor probs = torch::softmax(logits / o.temperature, -1);
  if (o.top_p < 1.0) {
    // Keep the most likely tokens until their probability reaches top_p (at least one).
    auto [sorted, order] = probs.sort(/*dim=*/-1, /*descending=*/true);
    const at::Tensor before = sorted.cumsum(-1) - sorted;  // probability of the tokens above
    const at::Tensor dropped = (before >= o.top_p).index_select(0, order.argsort());
    probs = probs.masked_fill(dropped, 0);
  }
  return at::multinomial(probs, 1, /*replacement=*/false, generator).item<int64_t>();
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> Generate(Transformer& model,
                                              const std::vector<int64_t>& prompt,
                                              const SamplingOptions& options,
                                              const std::function<void(int64_t)>& on_token) {
  const ModelArgs& args = model->args();
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  const int64_t total = int64_t(prompt.size()) + options.max_new_tokens;
  if (total > args.max_seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt's ", prompt.size(), " tokens + ", options.max_new_tokens,
                     " new ones exceed the model's max_seq_len (max_position_embeddings) of ",
                     args.max_seq_len));
  }
  torch::NoGradGuard no_grad;
  model->SetAttentionPlan(
      std::make_shared<KvCacheAttentionPlan>(args.n_layers, std::make_shared<TiledBlockKernel>()));
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);

  std::vector<int64_t> fresh;  // the tokens the next forward takes
  BlockPositions positions;
  fresh = prompt;
  positions.positions.resize(prompt.size());
  std::iota(positions.positions.begin(), positions.positions.end(), 0);
  std::vector<int64_t> generated;
  while (int64_t(generated.size()) < options.max_new_tokens) {
    const at::Tensor tokens = torch::tensor(fresh, torch::kInt64).view({1, -1});
    const at::Tensor logits = model->forward(tokens, positions);  // (1, L, V)
    const int64_t next = NextToken(logits[0][-1], options, generator);
    generated.push_back(next);
    if (on_token) on_token(next);
    const int64_t position = positions.positions.back() + 1;
    fresh = {next};
    positions.positions = {position};
  }
  return generated;
}

}  // namespace ringtrain
