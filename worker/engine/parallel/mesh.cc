#include "worker/engine/parallel/mesh.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "worker/engine/parallel/document_balancer.h"

namespace ringtrain {

std::vector<int64_t> Mesh::CpGroupRanks() const {
  std::vector<int64_t> ranks;
  for (int64_t c = 0; c < cp; ++c) ranks.push_back(dp_rank() * cp + c);
  return ranks;
}

std::vector<int64_t> Mesh::DpGroupRanks() const {
  std::vector<int64_t> ranks;
  for (int64_t d = 0; d < dp; ++d) ranks.push_back(d * cp + cp_rank());
  return ranks;
}

std::vector<int64_t> Mesh::FsdpGroupRanks() const {
  std::vector<int64_t> ranks;
  for (int64_t f = 0; f < fsdp_size(); ++f) ranks.push_back(replicate_rank() * fsdp_size() + f);
  return ranks;
}

std::vector<int64_t> Mesh::ReplicateGroupRanks() const {
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < replicate(); ++r) ranks.push_back(r * fsdp_size() + fsdp_rank());
  return ranks;
}

std::vector<int64_t> UlyssesGroupPositions(const std::vector<std::vector<int64_t>>& shards,
                                           int64_t ulysses, int64_t ring_rank) {
  if (ulysses <= 1) return shards[size_t(ring_rank)];
  std::vector<int64_t> merged;
  for (int64_t u = 0; u < ulysses; ++u) {
    const std::vector<int64_t>& shard = shards[size_t(ring_rank * ulysses + u)];
    merged.insert(merged.end(), shard.begin(), shard.end());
  }
  std::sort(merged.begin(), merged.end());
  return merged;
}

std::string Mesh::Describe() const {
  std::string text = absl::StrFormat("rank %d of %d: dp %d/%d, cp %d/%d", rank, world, dp_rank(),
                                     dp, cp_rank(), cp);
  if (ulysses > 1) {
    absl::StrAppendFormat(&text, " (ulysses %d/%d, ring %d/%d)", ulysses_rank(), ulysses,
                          ring_rank(), ring());
  }
  if (sharded) {
    absl::StrAppendFormat(&text, ", fsdp %d/%d (replica %d/%d)", fsdp_rank(), fsdp_size(),
                          replicate_rank(), replicate());
  }
  return text;
}

int64_t ShardChunkLength(int64_t seq_len, int64_t cp, LoadBalancer load_balancer) {
  switch (load_balancer) {
    case LoadBalancer::kHeadTail: return seq_len / (2 * cp);
    case LoadBalancer::kNone: return seq_len / cp;
    case LoadBalancer::kDocument: return seq_len / DocumentChunkCount(seq_len, cp);
  }
  return seq_len / cp;
}

std::vector<int64_t> ShardPositions(int64_t seq_len, int64_t cp, int64_t cp_rank,
                                    LoadBalancer load_balancer) {
  if (load_balancer == LoadBalancer::kDocument) {
    return MakeCpLayout(seq_len, cp, load_balancer, nullptr).positions[size_t(cp_rank)];
  }
  const int64_t chunk = ShardChunkLength(seq_len, cp, load_balancer);
  std::vector<int64_t> chunks = {cp_rank};
  if (load_balancer == LoadBalancer::kHeadTail) chunks.push_back(2 * cp - 1 - cp_rank);
  std::vector<int64_t> positions;
  for (int64_t c : chunks) {
    for (int64_t i = 0; i < chunk; ++i) positions.push_back(c * chunk + i);
  }
  return positions;
}

}  // namespace ringtrain
