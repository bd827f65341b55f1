// cp_shard: the one place a batch is split across the CP group. Inputs, labels and positions are
// sharded together, right after the batch is loaded; RoPE then uses the sharded positions, so the
// frequency tables are never sharded.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_CP_SHARD_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_CP_SHARD_H_

#include <ATen/Tensor.h>

#include "common/config/choices.h"
#include "worker/engine/kernels/tiled_attention.h"

namespace ringtrain {

struct ShardedBatch {
  at::Tensor inputs;         // (B, L / cp) int64
  at::Tensor labels;         // (B, L / cp) int64
  BlockPositions positions;  // (L / cp,) global positions of the local tokens
};

// inputs, labels (B, L) → this CP rank's shard (ShardPositions order). cp = 1 is the identity.
ShardedBatch CpShard(const at::Tensor& inputs, const at::Tensor& labels, int64_t cp,
                     int64_t cp_rank, LoadBalancer load_balancer);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_CP_SHARD_H_
