// Text generation with a KV cache on the CPU (ringtrain-generate): the prompt in one forward, then
// one token per forward, each attending over the cached keys and values (KvCacheAttentionPlan).
#ifndef RINGTRAIN_TOOLS_GENERATE_SAMPLER_H_
#define RINGTRAIN_TOOLS_GENERATE_SAMPLER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/model/llama.h"

namespace ringtrain {

struct SamplingOptions {
  int64_t max_new_tokens = 32;
  // 0: greedy (the most likely token; the first on ties, as torch.argmax and transformers'
  // generate(do_sample=False)). > 0: sample from softmax(logits / temperature) restricted to the
  // smallest set of most likely tokens whose probability reaches top_p (transformers' top-p).
  double temperature = 0.0;
  double top_p = 1.0;
  uint64_t seed = 0;  // the sampling generator's seed
};

// The new token ids after `prompt` (not empty). The model's attention plan is replaced by a KV
// cache. INVALID_ARGUMENT when prompt + max_new_tokens exceed the model's max_seq_len (its RoPE
// tables). `on_token`, when given, is called with each new id as it is chosen.
absl::StatusOr<std::vector<int64_t>> Generate(Transformer& model,
                                              const std::vector<int64_t>& prompt,
                                              const SamplingOptions& options,
                                              const std::function<void(int64_t)>& on_token = {});

}  // namespace ringtrain

#endif  // RINGTRAIN_TOOLS_GENERATE_SAMPLER_H_
