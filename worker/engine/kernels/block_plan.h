// How one causal attention block (query positions × key positions, both known on the host) is cut
// into the calls a fused attention kernel can make: each call covers a query range and a key range
// (local indices) whose mask is either none ("full": every key is at or before every query) or the
// aligned causal triangle (the two ranges hold the same positions, in increasing order). Pairs the
// mask hides entirely are left out; rows no call covers see no key (output 0, log-sum-exp −inf).
//
// Fused kernels (flash, memory-efficient, cuDNN) take only those two masks, while a rank's shard
// under head-tail load balancing is two chunks, so most ring blocks are a few such pieces: the own
// block is one causal call; a block from an earlier rank is one full call over its first chunk;
// from a later rank, one full call of the tail queries. Torch-free: the plan is made from positions
// alone.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_BLOCK_PLAN_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_BLOCK_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "worker/engine/kernels/document_mask.h"

namespace ringtrain {

struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
  int64_t size() const { return end - begin; }
  bool operator==(const IndexRange& o) const { return begin == o.begin && end == o.end; }
};

struct FusedCall {
  IndexRange q;         // rows of the block
  IndexRange k;         // columns of the block
  bool causal = false;  // aligned causal triangle (q and k hold the same positions); else no mask
  bool operator==(const FusedCall& o) const { return q == o.q && k == o.k && causal == o.causal; }
};

// A plan never has more calls than this; positions that would need more (no runs of consecutive
// positions) are left to the tiled kernel.
constexpr size_t kMaxFusedCalls = 64;

// The calls for a causal block (key p_k visible to query p_q iff p_k <= p_q), in a fixed order
// (by query range, then key range), so the merge order — and the result — is the same every run.
// `causal_mask` false: one full call. nullopt when the block needs more than kMaxFusedCalls calls.
std::optional<std::vector<FusedCall>> PlanFusedCalls(const std::vector<int64_t>& q_positions,
                                                     const std::vector<int64_t>& k_positions,
                                                     bool causal_mask);

// The calls for a block-causal block of batch row `row` of `mask` (document_mask.h): the runs of
// both sides are cut at document bounds and only pieces of the same document are paired, so a
// call never spans two documents. nullopt when more than kMaxFusedCalls calls are needed (many
// short documents: the caller falls back to the tiled kernel).
std::optional<std::vector<FusedCall>> PlanDocumentCalls(const std::vector<int64_t>& q_positions,
                                                        const std::vector<int64_t>& k_positions,
                                                        const DocumentMask& mask, int64_t row);

// "q[0,32)×k[0,32) causal, q[32,64)×k[0,32)" — for logs and test messages.
std::string DescribePlan(const std::vector<FusedCall>& calls);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_BLOCK_PLAN_H_
