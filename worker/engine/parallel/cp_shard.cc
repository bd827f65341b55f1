#include "worker/engine/parallel/cp_shard.h"

#include <torch/torch.h>

#include "worker/engine/parallel/mesh.h"

namespace ringtrain {

ShardedBatch CpShard(const at::Tensor& inputs, const at::Tensor& labels, int64_t cp,
                     int64_t cp_rank, LoadBalancer load_balancer) {
  const int64_t seq_len = inputs.size(1);
  ShardedBatch shard;
  shard.positions.positions = ShardPositions(seq_len, cp, cp_rank, load_balancer);
  const at::Tensor index = shard.positions.AsTensor();
  shard.inputs = inputs.index_select(1, index);
  shard.labels = labels.index_select(1, index);
  return shard;
}

}  // namespace ringtrain
