// The DP × CP device mesh, torch-free. world = dp × cp with cp innermost:
//   rank = dp_rank · cp + cp_rank, so ranks 0 … cp−1 form CP group 0;
//   cp_rank = ring_rank · ulysses + ulysses_rank, so a Ulysses group is consecutive ranks.
// A CP group shares one sequence (ring attention); a DP group (same cp_rank) shares gradients with
// the other replicas. The data-parallel ranks are replicate × shard (shard inner): with FSDP
// (`sharded`) the parameters are sharded over the FSDP group, the shard × cp consecutive ranks of
// one replica, and each shard's gradient is all-reduced over the replicate group (the ranks of the
// same FSDP rank in every replica). Replicated, gradients are all-reduced over the whole world.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_MESH_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_MESH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/choices.h"

namespace ringtrain {

struct Mesh {
  int64_t rank = 0;
  int64_t world = 1;
  int64_t dp = 1;
  int64_t cp = 1;
  int64_t shard = 1;     // divides dp
  bool sharded = false;  // FSDP over shard × cp
  // Context-parallel attention by Ulysses groups of `ulysses` consecutive cp ranks (innermost), and
  // rings of cp / ulysses ranks across them (one per Ulysses rank): ring attention is ulysses = 1,
  // Ulysses alone ulysses = cp, hybrid anything between.
  int64_t ulysses = 1;

  int64_t dp_rank() const { return rank / cp; }
  int64_t cp_rank() const { return rank % cp; }
  int64_t ring() const { return cp / ulysses; }
  int64_t ulysses_rank() const { return cp_rank() % ulysses; }
  int64_t ring_rank() const { return cp_rank() / ulysses; }
  int64_t fsdp_size() const { return shard * cp; }
  int64_t fsdp_rank() const { return rank % fsdp_size(); }
  int64_t replicate() const { return dp / shard; }
  int64_t replicate_rank() const { return rank / fsdp_size(); }
  std::vector<int64_t> FsdpGroupRanks() const;       // in fsdp_rank order
  std::vector<int64_t> ReplicateGroupRanks() const;  // in replicate_rank order
  // Global ranks of this rank's CP group (in cp_rank order) and DP group (in dp_rank order).
  std::vector<int64_t> CpGroupRanks() const;
  std::vector<int64_t> DpGroupRanks() const;
  // "rank 3 of 4: dp 1/2, cp 1/2" (+ " (ulysses 1/2, ring 0/1)" with Ulysses groups, + ", fsdp
  // 3/4" when sharded)
  std::string Describe() const;
};

// Which global sequence positions a CP rank holds, in its local order.
//   headtail: 2·cp chunks of L/(2·cp); rank r holds chunks r and 2·cp−1−r (balanced causal work)
//   none:     cp chunks of L/cp; rank r holds chunk r
//   document: planned per batch from its documents (document_balancer.h); here, the plan for plain
//             causal attention (one document), which ring attention falls back to
// Requires L divisible by 2·cp (headtail, document) or cp (none) — the config validation checks it.
std::vector<int64_t> ShardPositions(int64_t seq_len, int64_t cp, int64_t cp_rank,
                                    LoadBalancer load_balancer);

// The positions Ulysses group `ring_rank` holds together: its members' shards (`shards`, by cp
// rank; the group is cp ranks ring_rank · ulysses … + ulysses − 1) merged in ascending order. With
// ulysses = 1, cp rank ring_rank's shard as it is.
std::vector<int64_t> UlyssesGroupPositions(const std::vector<std::vector<int64_t>>& shards,
                                           int64_t ulysses, int64_t ring_rank);

// Length of the contiguous position runs (chunks) a shard is made of.
int64_t ShardChunkLength(int64_t seq_len, int64_t cp, LoadBalancer load_balancer);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_MESH_H_
