// cp_shard: the one place a batch is split across the CP group. Inputs, labels and positions are
// sharded together, right after the batch is loaded; RoPE then uses the sharded positions, so the
// frequency tables are never sharded. With packed documents (block-causal attention) the batch's
// document mask is made here too, from the EOS tokens of the whole (unsharded) batch, and the
// document balancer plans the layout from it (document_balancer.h).
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_CP_SHARD_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_CP_SHARD_H_

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/Tensor.h>

#include "common/config/choices.h"
#include "worker/engine/kernels/tiled_attention.h"

namespace ringtrain {

struct ShardSpec {
  int64_t cp = 1;
  int64_t cp_rank = 0;
  LoadBalancer load_balancer = LoadBalancer::kHeadTail;
  // Block-causal attention: a document ends with (and includes) this token. nullopt: causal.
  std::optional<int64_t> eos_id;
};

struct ShardedBatch {
  at::Tensor inputs;         // (B, L / cp) int64
  at::Tensor labels;         // (B, L / cp) int64
  BlockPositions positions;  // (L / cp,) global positions of the local tokens (+ documents, layout)
  std::vector<int64_t> cp_work;  // per cp rank: its attention work (visible query-key pairs)
};

// inputs, labels (B, L), on the host → this CP rank's shard. cp = 1 is the identity.
ShardedBatch CpShard(const at::Tensor& inputs, const at::Tensor& labels, const ShardSpec& spec);

// Plain causal attention (tests): CpShard with no EOS.
ShardedBatch CpShard(const at::Tensor& inputs, const at::Tensor& labels, int64_t cp,
                     int64_t cp_rank, LoadBalancer load_balancer);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_CP_SHARD_H_
