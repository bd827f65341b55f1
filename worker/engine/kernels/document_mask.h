// Packed documents (model.attn_mask_type = "block_causal"): a window of the token stream holds
// several documents, each ending with (and including) the EOS token, and a token attends to the
// earlier tokens of its own document only. Documents are runs of consecutive window positions, so
// the mask is kept as one number per token: where its document starts. The key at position p_k is
// visible to the query at p_q of batch row b iff
//
//     start[b][p_q] <= p_k <= p_q
//
// (plain causal attention is start = 0 everywhere). Every kernel decides tiles by this interval
// (index arithmetic, no mask tensor), and ring attention decides which blocks a rank needs by it.
// Torch-free.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_DOCUMENT_MASK_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_DOCUMENT_MASK_H_

#include <cstdint>
#include <vector>

namespace ringtrain {

struct DocumentMask {
  // Per batch row, per window position: the position where that token's document starts.
  std::vector<std::vector<int64_t>> starts;  // (B, L)
  int64_t rows() const { return int64_t(starts.size()); }
};

// The document starts of one window of `length` tokens: a token after an `eos` token starts a new
// document (the window's first token starts one too: a window may begin mid-document).
std::vector<int64_t> DocumentStarts(const int64_t* tokens, int64_t length, int64_t eos);

// The mask of a (B, L) batch of tokens, row-major.
DocumentMask MakeDocumentMask(const int64_t* tokens, int64_t batch, int64_t length, int64_t eos);

// The keys a query sees among `keys` [first, last) (positions in increasing order): the index
// range of those at positions within [lo, pq]. Empty (first == last) when none.
struct KeyRange {
  int64_t first = 0, last = 0;
  bool empty() const { return first >= last; }
};
KeyRange VisibleKeys(const int64_t* keys, int64_t count, int64_t lo, int64_t pq);

// The lower bound of the keys visible to the query at position `pq` of batch row `row`: its
// document's start, or 0 without documents (`mask` null).
inline int64_t VisibleFrom(const DocumentMask* mask, int64_t row, int64_t pq) {
  return mask == nullptr ? 0 : mask->starts[size_t(row)][size_t(pq)];
}

// How much of a key tile the query tile of batch row `row` sees: no pair (kHidden), every pair
// (kFull), or some (kPartial: masked per row). Queries and keys are given by position, `nq` and
// `nk` of them. kHidden is exact when the key positions increase (a tile of one shard run);
// otherwise a tile is kHidden only when no query's interval meets the keys' span.
enum class TileCover { kHidden, kFull, kPartial };
TileCover CoverOfTile(const int64_t* queries, int64_t nq, const int64_t* keys, int64_t nk,
                      const DocumentMask* mask, int64_t row);

// Query-key pairs visible within one batch row: queries at `q_positions` (any order), keys at
// `k_positions` (any order). O((Lq + Lk) log Lk).
int64_t VisiblePairs(const std::vector<int64_t>& q_positions,
                     const std::vector<int64_t>& k_positions, const DocumentMask* mask,
                     int64_t row);

// Whether any query at `q_positions` of any row sees any key at `k_positions` (rows: mask's, or
// one without a mask).
bool AnyVisible(const std::vector<int64_t>& q_positions, const std::vector<int64_t>& k_positions,
                const DocumentMask* mask);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_DOCUMENT_MASK_H_
