#include "worker/engine/parallel/document_balancer.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <utility>

#include "worker/engine/parallel/mesh.h"

namespace ringtrain {
namespace {

// The branch-and-bound search's budget per batch: a few milliseconds at most.
constexpr int64_t kSearchNodes = 200000;

int64_t MaxLoad(const std::vector<int64_t>& loads) {
  return *std::max_element(loads.begin(), loads.end());
}

// Largest first, each chunk to the least-loaded rank with room (lowest rank on ties).
std::vector<std::vector<int64_t>> GreedyPlacement(const std::vector<int64_t>& work, int64_t cp) {
  const int64_t chunks = int64_t(work.size()), per_rank = chunks / cp;
  std::vector<int64_t> order(work.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return work[size_t(a)] > work[size_t(b)]; });
  std::vector<std::vector<int64_t>> placement(static_cast<size_t>(cp));
  std::vector<int64_t> loads(size_t(cp), 0);
  for (int64_t c : order) {
    int64_t best = -1;
    for (int64_t r = 0; r < cp; ++r) {
      if (int64_t(placement[size_t(r)].size()) == per_rank) continue;
      if (best < 0 || loads[size_t(r)] < loads[size_t(best)]) best = r;
    }
    placement[size_t(best)].push_back(c);
    loads[size_t(best)] += work[size_t(c)];
  }
  return placement;
}

// The best swap of a chunk of rank `a` with a lighter chunk of rank `b` (loads la > lb) that
// leaves both loads strictly between lb and la: the one that brings them closest together.
// Returns the chunk indices, or {-1, -1} when no swap does.
std::pair<int64_t, int64_t> BestSwap(const std::vector<int64_t>& work,
                                     const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                     int64_t gap) {
  std::pair<int64_t, int64_t> best{-1, -1};
  int64_t best_value = gap;  // |new la − new lb| = |gap − 2d|; must drop below the gap
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = 0; j < b.size(); ++j) {
      const int64_t d = work[size_t(a[i])] - work[size_t(b[j])];
      if (d <= 0 || d >= gap) continue;
      const int64_t value = std::abs(gap - 2 * d);
      if (value < best_value) {
        best_value = value;
        best = {int64_t(i), int64_t(j)};
      }
    }
  }
  return best;
}

// Local search by swapping chunks between two ranks. Each round takes the best swap of the busiest
// rank with another (its load drops, the other's stays below it); when there is none, the swap
// between any two ranks that evens them most (the sum of squared loads drops, so the search ends,
// and no load rises above the larger of the two), which often opens a swap for the busiest rank.
// The maximum never rises.
void ImproveBySwaps(const std::vector<int64_t>& work,
                    std::vector<std::vector<int64_t>>* placement) {
  const int64_t cp = int64_t(placement->size());
  std::vector<int64_t> loads = RankWork(*placement, work);
  auto apply = [&](int64_t a, int64_t b, std::pair<int64_t, int64_t> swap) {
    auto& ac = (*placement)[size_t(a)];
    auto& bc = (*placement)[size_t(b)];
    const int64_t d = work[size_t(ac[size_t(swap.first)])] - work[size_t(bc[size_t(swap.second)])];
    std::swap(ac[size_t(swap.first)], bc[size_t(swap.second)]);
    loads[size_t(a)] -= d;
    loads[size_t(b)] += d;
  };
  for (size_t round = 0; round < 64 * work.size(); ++round) {
    const int64_t h = std::max_element(loads.begin(), loads.end()) - loads.begin();
    // The busiest rank with each lighter one, the lightest first.
    std::vector<int64_t> others;
    for (int64_t r = 0; r < cp; ++r) {
      if (r != h) others.push_back(r);
    }
    std::stable_sort(others.begin(), others.end(),
                     [&](int64_t x, int64_t y) { return loads[size_t(x)] < loads[size_t(y)]; });
    bool moved = false;
    for (int64_t r : others) {
      const auto swap = BestSwap(work, (*placement)[size_t(h)], (*placement)[size_t(r)],
                                 loads[size_t(h)] - loads[size_t(r)]);
      if (swap.first >= 0) {
        apply(h, r, swap);
        moved = true;
        break;
      }
    }
    if (moved) continue;
    // No swap lowers the busiest rank: even out the pair of other ranks that gains most.
    int64_t best_gain = 0, best_a = -1, best_b = -1;
    std::pair<int64_t, int64_t> best_swap{-1, -1};
    for (int64_t a = 0; a < cp; ++a) {
      for (int64_t b = 0; b < cp; ++b) {
        const int64_t gap = loads[size_t(a)] - loads[size_t(b)];
        if (gap <= 0) continue;
        const auto swap = BestSwap(work, (*placement)[size_t(a)], (*placement)[size_t(b)], gap);
        if (swap.first < 0) continue;
        const int64_t d = work[size_t((*placement)[size_t(a)][size_t(swap.first)])] -
                          work[size_t((*placement)[size_t(b)][size_t(swap.second)])];
        const int64_t gain = d * (gap - d);  // half the drop in the sum of squared loads
        if (gain > best_gain) {
          best_gain = gain;
          best_a = a;
          best_b = b;
          best_swap = swap;
        }
      }
    }
    if (best_a < 0) return;
    apply(best_a, best_b, best_swap);
  }
}

// Branch and bound over placements, largest chunk first, each to a rank with room (ranks of equal
// load and count tried once), pruned by the best maximum found so far; stops at `node_budget`
// nodes or when the maximum reaches its lower bound (the mean rounded up, or the largest chunk).
// Replaces `placement` when it finds a lower maximum. Deterministic: the same inputs give the same
// placement on every rank.
void SearchPlacement(const std::vector<int64_t>& work, std::vector<std::vector<int64_t>>* placement,
                     int64_t node_budget) {
  const int64_t cp = int64_t(placement->size()), per_rank = int64_t(work.size()) / cp;
  std::vector<int64_t> order(work.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return work[size_t(a)] > work[size_t(b)]; });
  const int64_t total = std::accumulate(work.begin(), work.end(), int64_t{0});
  const int64_t bound =
      std::max((total + cp - 1) / cp, work.empty() ? int64_t{0} : work[size_t(order[0])]);
  int64_t best = MaxLoad(RankWork(*placement, work));
  if (best <= bound) return;
  std::vector<int64_t> loads(size_t(cp), 0), owner(work.size(), -1);
  std::vector<int64_t> counts(size_t(cp), 0), best_owner;
  int64_t nodes = 0;
  std::function<void(size_t)> place = [&](size_t i) {
    if (best <= bound || ++nodes > node_budget) return;
    if (i == order.size()) {
      best = MaxLoad(loads);
      best_owner = owner;
      return;
    }
    const int64_t c = order[i], w = work[size_t(c)];
    for (int64_t r = 0; r < cp; ++r) {
      if (counts[size_t(r)] == per_rank || loads[size_t(r)] + w >= best) continue;
      bool seen = false;  // a rank like an earlier one (same load and count) gives the same trees
      for (int64_t e = 0; e < r && !seen; ++e) {
        seen = loads[size_t(e)] == loads[size_t(r)] && counts[size_t(e)] == counts[size_t(r)];
      }
      if (seen) continue;
      loads[size_t(r)] += w;
      counts[size_t(r)] += 1;
      owner[size_t(c)] = r;
      place(i + 1);
      loads[size_t(r)] -= w;
      counts[size_t(r)] -= 1;
      owner[size_t(c)] = -1;
    }
  };
  place(0);
  if (best_owner.empty()) return;
  for (auto& chunks : *placement) chunks.clear();
  for (size_t c = 0; c < work.size(); ++c)
    (*placement)[size_t(best_owner[c])].push_back(int64_t(c));
}

}  // namespace

int64_t DocumentChunkCount(int64_t seq_len, int64_t cp) {
  for (int64_t m : {4, 2}) {
    const int64_t chunks = 2 * cp * m;
    if (seq_len % chunks == 0 && seq_len / chunks >= 16) return chunks;
  }
  return 2 * cp;
}

std::vector<int64_t> ChunkWork(int64_t seq_len, int64_t chunks, const DocumentMask* mask) {
  const int64_t length = seq_len / chunks;
  const int64_t rows = mask == nullptr ? 1 : mask->rows();
  std::vector<int64_t> work(size_t(chunks), 0);
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t p = 0; p < seq_len; ++p) {
      work[size_t(p / length)] += p - VisibleFrom(mask, row, p) + 1;
    }
  }
  return work;
}

std::vector<std::vector<int64_t>> HeadTailPlacement(int64_t chunks, int64_t cp) {
  const int64_t m = chunks / (2 * cp);
  std::vector<std::vector<int64_t>> placement(static_cast<size_t>(cp));
  for (int64_t r = 0; r < cp; ++r) {
    for (int64_t part : {r, 2 * cp - 1 - r}) {
      for (int64_t i = 0; i < m; ++i) placement[size_t(r)].push_back(part * m + i);
    }
  }
  return placement;
}

std::vector<std::vector<int64_t>> PlaceChunks(const std::vector<int64_t>& work, int64_t cp) {
  std::vector<std::vector<int64_t>> placement = HeadTailPlacement(int64_t(work.size()), cp);
  std::vector<std::vector<int64_t>> greedy = GreedyPlacement(work, cp);
  if (MaxLoad(RankWork(greedy, work)) < MaxLoad(RankWork(placement, work))) {
    placement = std::move(greedy);
  }
  ImproveBySwaps(work, &placement);
  SearchPlacement(work, &placement, kSearchNodes);
  for (auto& chunks : placement) std::sort(chunks.begin(), chunks.end());
  return placement;
}

std::vector<int64_t> RankWork(const std::vector<std::vector<int64_t>>& placement,
                              const std::vector<int64_t>& work) {
  std::vector<int64_t> loads;
  for (const auto& chunks : placement) {
    int64_t load = 0;
    for (int64_t c : chunks) load += work[size_t(c)];
    loads.push_back(load);
  }
  return loads;
}

double Imbalance(const std::vector<int64_t>& loads) {
  const int64_t total = std::accumulate(loads.begin(), loads.end(), int64_t{0});
  if (total == 0) return 1.0;
  return double(MaxLoad(loads)) * double(loads.size()) / double(total);
}

CpLayout MakeCpLayout(int64_t seq_len, int64_t cp, LoadBalancer balancer,
                      const DocumentMask* mask) {
  CpLayout layout;
  if (balancer != LoadBalancer::kDocument) {
    for (int64_t r = 0; r < cp; ++r) {
      layout.positions.push_back(ShardPositions(seq_len, cp, r, balancer));
    }
  } else {
    const int64_t chunks = DocumentChunkCount(seq_len, cp), length = seq_len / chunks;
    for (const auto& rank_chunks : PlaceChunks(ChunkWork(seq_len, chunks, mask), cp)) {
      std::vector<int64_t> positions;
      for (int64_t c : rank_chunks) {
        for (int64_t i = 0; i < length; ++i) positions.push_back(c * length + i);
      }
      layout.positions.push_back(std::move(positions));
    }
  }
  const int64_t rows = mask == nullptr ? 1 : mask->rows();
  std::vector<int64_t> all(static_cast<size_t>(seq_len), 0);
  std::iota(all.begin(), all.end(), 0);
  for (const auto& positions : layout.positions) {
    int64_t work = 0;
    for (int64_t row = 0; row < rows; ++row) work += VisiblePairs(positions, all, mask, row);
    layout.work.push_back(work);
  }
  return layout;
}

}  // namespace ringtrain
