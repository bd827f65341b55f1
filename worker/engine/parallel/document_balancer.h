// The document load balancer (parallelism.context_parallel_load_balancer = "document"): where each
// chunk of a batch's sequence goes, planned per batch from its documents, so that every CP rank
// does about the same attention work. A rank's work is the query-key pairs its queries see (under
// block-causal attention, only pairs within a document), summed over the batch rows; every rank
// holds the same number of chunks, so the token count per rank stays equal.
//
// The sequence is cut into 2·cp·m chunks (m = 4, 2 or 1: the largest that divides L into chunks of
// at least 16 tokens). The placement starts from the better of head-tail's (expressed at this
// granularity) and a greedy largest-first fill, then swaps chunks between the busiest rank and
// another while that lowers the busiest rank's work: it is never worse than head-tail, and the
// same inputs give the same placement on every rank. Torch-free.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_DOCUMENT_BALANCER_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_DOCUMENT_BALANCER_H_

#include <cstdint>
#include <vector>

#include "common/config/choices.h"
#include "worker/engine/kernels/document_mask.h"

namespace ringtrain {

// How many chunks the document balancer cuts a sequence of `seq_len` into for `cp` ranks (seq_len
// divisible by 2·cp, as the config validation requires).
int64_t DocumentChunkCount(int64_t seq_len, int64_t cp);

// The attention work of the queries of each of `chunks` equal chunks: visible query-key pairs,
// summed over the mask's rows (one row of plain causal attention when `mask` is null).
std::vector<int64_t> ChunkWork(int64_t seq_len, int64_t chunks, const DocumentMask* mask);

// Head-tail's placement at `chunks` (a multiple of 2·cp) chunks: rank r holds the chunks of the
// r-th and the (2·cp − 1 − r)-th of 2·cp equal parts.
std::vector<std::vector<int64_t>> HeadTailPlacement(int64_t chunks, int64_t cp);

// The balanced placement of chunks with these `work`s on `cp` ranks: per rank, its chunks in
// increasing order, chunks / cp of them.
std::vector<std::vector<int64_t>> PlaceChunks(const std::vector<int64_t>& work, int64_t cp);

// Per rank, the work of its chunks.
std::vector<int64_t> RankWork(const std::vector<std::vector<int64_t>>& placement,
                              const std::vector<int64_t>& work);

// max / mean of `loads` (1 when all are 0).
double Imbalance(const std::vector<int64_t>& loads);

// One batch's layout over the CP group: every rank's positions (in its local order) and work.
struct CpLayout {
  std::vector<std::vector<int64_t>> positions;  // per cp rank
  std::vector<int64_t> work;                    // per cp rank: visible query-key pairs
};

// The layout under `balancer`: headtail and none are fixed (ShardPositions); document is planned
// from `mask` (plain causal when null). The work is counted under `mask` in every case.
CpLayout MakeCpLayout(int64_t seq_len, int64_t cp, LoadBalancer balancer, const DocumentMask* mask);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_DOCUMENT_BALANCER_H_
