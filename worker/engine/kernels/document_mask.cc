#include "worker/engine/kernels/document_mask.h"

#include <algorithm>

namespace ringtrain {
namespace {

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

std::vector<int64_t> DocumentStarts(const int64_t* tokens, int64_t length, int64_t eos) {
  std::vector<int64_t> starts(size_t(length), 0);
  int64_t start = 0;
  for (int64_t p = 0; p < length; ++p) {
    starts[size_t(p)] = start;
    if (tokens[p] == eos) start = p + 1;  // the EOS ends its document; the next token starts one
  }
  return starts;
}

DocumentMask MakeDocumentMask(const int64_t* tokens, int64_t batch, int64_t length, int64_t eos) {
  DocumentMask mask;
  for (int64_t b = 0; b < batch; ++b) {
    mask.starts.push_back(DocumentStarts(tokens + b * length, length, eos));
  }
  return mask;
}

KeyRange VisibleKeys(const int64_t* keys, int64_t count, int64_t lo, int64_t pq) {
  const int64_t* first = std::lower_bound(keys, keys + count, lo);
  const int64_t* last = std::upper_bound(first, keys + count, pq);
  return {first - keys, std::max(first, last) - keys};
}

TileCover CoverOfTile(const int64_t* queries, int64_t nq, const int64_t* keys, int64_t nk,
                      const DocumentMask* mask, int64_t row) {
  const auto [k_min, k_max] = std::minmax_element(keys, keys + nk);
  const auto [q_min, q_max] = std::minmax_element(queries, queries + nq);
  if (mask == nullptr) {
    if (*k_min > *q_max) return TileCover::kHidden;
    return *k_max <= *q_min ? TileCover::kFull : TileCover::kPartial;
  }
  const bool ascending = std::is_sorted(keys, keys + nk);
  bool full = true, hidden = true;
  for (int64_t i = 0; i < nq && (full || hidden); ++i) {
    const int64_t pq = queries[i], lo = VisibleFrom(mask, row, pq);
    full = full && lo <= *k_min && *k_max <= pq;
    if (hidden) {
      hidden = ascending ? VisibleKeys(keys, nk, lo, pq).empty() : *k_max < lo || *k_min > pq;
    }
  }
  if (hidden) return TileCover::kHidden;
  return full ? TileCover::kFull : TileCover::kPartial;
}

int64_t VisiblePairs(const std::vector<int64_t>& q_positions,
                     const std::vector<int64_t>& k_positions, const DocumentMask* mask,
                     int64_t row) {
  const std::vector<int64_t> keys = Sorted(k_positions);
  int64_t pairs = 0;
  for (int64_t pq : q_positions) {
    const KeyRange r =
        VisibleKeys(keys.data(), int64_t(keys.size()), VisibleFrom(mask, row, pq), pq);
    pairs += r.last - r.first;
  }
  return pairs;
}

bool AnyVisible(const std::vector<int64_t>& q_positions, const std::vector<int64_t>& k_positions,
                const DocumentMask* mask) {
  const std::vector<int64_t> keys = Sorted(k_positions);
  const int64_t rows = mask == nullptr ? 1 : mask->rows();
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t pq : q_positions) {
      const KeyRange r =
          VisibleKeys(keys.data(), int64_t(keys.size()), VisibleFrom(mask, row, pq), pq);
      if (!r.empty()) return true;
    }
  }
  return false;
}

}  // namespace ringtrain
