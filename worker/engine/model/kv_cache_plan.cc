#include "worker/engine/model/kv_cache_plan.h"

#include <torch/torch.h>

namespace ringtrain {

KvCacheAttentionPlan::KvCacheAttentionPlan(int64_t n_layers, std::shared_ptr<BlockKernel> block)
    : n_layers_(n_layers), block_(std::move(block)), keys_(n_layers), values_(n_layers) {}

BlockOutput KvCacheAttentionPlan::Forward(const at::Tensor& q, const at::Tensor& kv,
                                          const BlockPositions& positions, double scale) {
  const int64_t layer = next_layer_;
  next_layer_ = (next_layer_ + 1) % n_layers_;
  if (layer == 0) {
    cached_.positions.insert(cached_.positions.end(), positions.positions.begin(),
                             positions.positions.end());
  }
  keys_[layer] = keys_[layer].defined() ? torch::cat({keys_[layer], kv[0]}, 2) : kv[0].clone();
  values_[layer] =
      values_[layer].defined() ? torch::cat({values_[layer], kv[1]}, 2) : kv[1].clone();
  AttentionComputeTimer timer(stats_);
  BlockOutput result = block_->Forward(q, keys_[layer].contiguous(), values_[layer].contiguous(),
                                       positions, cached_, scale);
  stats_.scores_computed += result.scores_computed;
  return result;
}

std::pair<at::Tensor, at::Tensor> KvCacheAttentionPlan::Backward(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const BlockPositions&, double) {
  TORCH_CHECK(false, "the KV-cache attention plan decodes only: it has no backward");
}

}  // namespace ringtrain
