#include "worker/engine/kernels/fused_cpu_plan.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace ringtrain {
namespace fused_cpu_internal {

std::vector<Tile> MakeTiles(const std::vector<int64_t>& positions, int64_t tile) {
  const int64_t length = int64_t(positions.size());
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t i = 0; i < length;) {
    int64_t j = i + 1;
    while (j < length && positions[size_t(j)] == positions[size_t(j - 1)] + 1) ++j;
    runs.push_back({i, j});
    i = j;
  }
  if (runs.size() > 64) runs = {{0, length}};  // no structure worth following
  std::vector<Tile> tiles;
  for (const auto& [run_begin, run_end] : runs) {
    for (int64_t b = run_begin; b < run_end; b += tile) {
      Tile t{b, std::min(run_end, b + tile)};
      t.min_pos = t.max_pos = positions[size_t(b)];
      for (int64_t i = b; i < t.end; ++i) {
        const int64_t p = positions[size_t(i)];
        t.min_pos = std::min(t.min_pos, p);
        t.max_pos = std::max(t.max_pos, p);
        if (i > b && p <= positions[size_t(i - 1)]) t.ascending = false;
      }
      tiles.push_back(t);
    }
  }
  return tiles;
}

Cover CoverOf(const Tile& q, const Tile& k) {
  if (k.min_pos > q.max_pos) return Cover::kHidden;
  if (k.max_pos <= q.min_pos) return Cover::kFull;
  return Cover::kPartial;
}

Plan MakePlan(const std::vector<int64_t>& q_positions, const std::vector<int64_t>& k_positions,
              int64_t group, int64_t q_tile, int64_t kv_tile, const DocumentMask* mask) {
  Plan plan;
  plan.q_tiles = MakeTiles(q_positions, q_tile);
  plan.k_tiles = MakeTiles(k_positions, kv_tile);
  plan.rows = mask == nullptr ? 1 : mask->rows();
  for (int64_t row = 0; row < plan.rows; ++row) {
    for (const Tile& qt : plan.q_tiles) {
      std::vector<Plan::Pair> pairs;
      int64_t cost = 0;
      for (int64_t j = 0; j < int64_t(plan.k_tiles.size()); ++j) {
        const Tile& kt = plan.k_tiles[size_t(j)];
        const Cover cover = mask == nullptr
                                ? CoverOf(qt, kt)
                                : CoverOfTile(q_positions.data() + qt.begin, qt.size(),
                                              k_positions.data() + kt.begin, kt.size(), mask, row);
        if (cover == Cover::kHidden) continue;
        pairs.push_back({j, cover});
        cost += group * qt.size() * kt.size();
      }
      plan.pairs.push_back(std::move(pairs));
      plan.item_cost.push_back(cost);
    }
  }
  return plan;
}

std::vector<int64_t> SplitByCost(const Plan& plan, int64_t items, int64_t parts) {
  const int64_t tiles = plan.q_tile_count();
  const int64_t per_row = items / plan.rows;  // items of one batch row (Hk · tiles)
  auto cost = [&](int64_t item) {
    const int64_t row = plan.rows == 1 ? 0 : item / per_row;
    return plan.item_cost[size_t(row * tiles + item % tiles)] + 1;
  };
  int64_t total = 0;
  for (int64_t i = 0; i < items; ++i) total += cost(i);
  std::vector<int64_t> bounds = {0};
  int64_t acc = 0;
  for (int64_t i = 0; i < items && int64_t(bounds.size()) < parts; ++i) {
    acc += cost(i);
    // Close a part once it holds its share (integer arithmetic: the same cut every run).
    if (acc * parts >= total * int64_t(bounds.size())) bounds.push_back(i + 1);
  }
  while (int64_t(bounds.size()) <= parts) bounds.push_back(items);
  bounds.back() = items;
  return bounds;
}

KeyRange VisibleColumns(const std::vector<int64_t>& k_positions, const Tile& kt, Cover cover,
                        int64_t lo, int64_t pq) {
  if (cover == Cover::kFull) return {0, kt.size()};
  if (!kt.ascending) return {-1, -1};
  return VisibleKeys(k_positions.data() + kt.begin, kt.size(), lo, pq);
}

void MaskRow(float* s, const std::vector<int64_t>& k_positions, const Tile& kt, int64_t lo,
             int64_t pq) {
  for (int64_t j = 0; j < kt.size(); ++j) {
    const int64_t pk = k_positions[size_t(kt.begin + j)];
    if (pk > pq || pk < lo) s[j] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace fused_cpu_internal
}  // namespace ringtrain
