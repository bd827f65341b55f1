// Decoding with a KV cache (ringtrain-generate): an attention plan for a model that is given only
// the new tokens at each forward. Each layer's K and V are appended to that layer's cache, and the
// new queries attend over everything cached, causally by position. Forward only (no backward).
//
// The model calls Attend once per layer per forward, in layer order (TransformerImpl::forward), so
// the plan counts calls to know the layer.
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_KV_CACHE_PLAN_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_KV_CACHE_PLAN_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/engine/model/attention_plan.h"

namespace ringtrain {

class KvCacheAttentionPlan : public AttentionPlan {
 public:
  KvCacheAttentionPlan(int64_t n_layers, std::shared_ptr<BlockKernel> block);

  // q (B, H, L, D) for the L new tokens at `positions`; kv (2, B, Hk, L, D) is appended to the
  // layer's cache. The positions must continue those cached (the caller's contract).
  BlockOutput Forward(const at::Tensor& q, const at::Tensor& kv, const BlockPositions& positions,
                      double scale) override;
  std::pair<at::Tensor, at::Tensor> Backward(const at::Tensor& q, const at::Tensor& kv,
                                             const at::Tensor& out, const at::Tensor& lse,
                                             const at::Tensor& dout,
                                             const BlockPositions& positions,
                                             double scale) override;
  std::string Describe() const override { return "kv cache, " + block_->Describe(); }

  int64_t cached_tokens() const { return int64_t(cached_.positions.size()); }

 private:
  int64_t n_layers_;
  std::shared_ptr<BlockKernel> block_;
  int64_t next_layer_ = 0;
  std::vector<at::Tensor> keys_, values_;  // per layer (B, Hk, T, D)
  BlockPositions cached_;                  // the T cached tokens' positions
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_KV_CACHE_PLAN_H_
