// The DP × CP mesh a config asks for, resolved against a world size once. "-1 fills the world" is
// stated here and nowhere else: the trainer, admission, `ringctl plan`, the memory plan and the
// elastic restart all work from ResolveMesh's result.
//
// world = replicate × shard × cp, cp innermost (rank = dp_rank · cp + cp_rank). dp = replicate ×
// shard is the data-parallel degree (ranks that read different samples); fsdp = shard × cp is the
// group parameters are sharded over.
#ifndef RINGTRAIN_COMMON_CONFIG_MESH_H_
#define RINGTRAIN_COMMON_CONFIG_MESH_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "common/config/job_config.h"

namespace ringtrain {

struct MeshDegrees {
  int64_t world = 1;
  int64_t replicate = 1;
  int64_t shard = 1;
  int64_t cp = 1;
  // Ulysses group size within cp (UlyssesDegree): 1 for ring; cp / ulysses rings of it (hybrid).
  int64_t ulysses = 1;
  // FSDP is on when the shard degree is > 1, or -1 in the config (then over shard × cp even when
  // shard fills to 1, as torchtitan shards over cp alone); shard = 1 keeps every rank a replica.
  bool sharded = false;
  // Micro-batches per optimizer step: global_batch_size / (dp × local_batch_size), 1 when unset.
  int64_t accumulation = 1;

  int64_t dp() const { return replicate * shard; }
  int64_t fsdp() const { return shard * cp; }
};

// Validates the config's [parallelism] against `world_size` and resolves it: replicate × shard ×
// cp == world (one -1 fills: shard when it is -1, an unset replicate then meaning 1; else
// replicate), seq_len divisible by 2·cp (headtail) or cp (none), global_batch_size a multiple of
// dp × local_batch_size. INVALID_ARGUMENT listing every problem, each naming the key, the value
// and values that would work.
absl::StatusOr<MeshDegrees> ResolveMesh(const JobConfig& config, int64_t world_size);

// The world a config asks for without being told one: replicate × shard × cp with -1 read as 1.
int64_t RequestedWorldSize(const JobConfig& config);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_MESH_H_
