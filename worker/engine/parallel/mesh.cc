#include "worker/engine/parallel/mesh.h"

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

std::string Mesh::Describe() const {
  std::string text = absl::StrFormat("rank %d of %d: dp %d/%d, cp %d/%d", rank, world, dp_rank(),
                                     dp, cp_rank(), cp);
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
