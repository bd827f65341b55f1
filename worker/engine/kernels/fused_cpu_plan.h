// Private to the fused CPU attention kernel (fused_cpu_attention.h): how one causal block is cut
// into tiles, which key tiles each query tile sees and with which mask, and how the work items are
// shared out between threads. Made from positions alone; torch-free.
//
// Dimension letters as in tiled_attention.h; G = query heads per kv head, Tq / Tk = tile lengths.
#ifndef RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_CPU_PLAN_H_
#define RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_CPU_PLAN_H_

#include <cstdint>
#include <vector>

#include "worker/engine/kernels/document_mask.h"

namespace ringtrain {
namespace fused_cpu_internal {

// A run of consecutive rows (query side) or columns (key side) and what the mask needs of it.
struct Tile {
  int64_t begin = 0, end = 0;  // local indices, end exclusive
  int64_t min_pos = 0, max_pos = 0;
  bool ascending = true;  // positions strictly increase: a query sees a prefix of the tile
  int64_t size() const { return end - begin; }
};

// Tiles of at most `tile` along `positions`, cut at every break in consecutive positions when there
// are few (the two chunks of a head-tail shard), so the mask is decided per chunk; the last tile
// of a run is ragged.
std::vector<Tile> MakeTiles(const std::vector<int64_t>& positions, int64_t tile);

// How much of a key tile a query tile sees (document_mask.h).
using Cover = TileCover;

// Plain causal: from the tiles' position spans alone.
Cover CoverOf(const Tile& q, const Tile& k);

// The sizes of one block: q (B, H, Lq, D), k and v (B, Hk, Lk, D), G = H / Hk.
struct Shape {
  int64_t batch, heads, kv_heads, group, lq, lk, dim;
};

// The block's tiles, which key tiles each query tile sees, and the work items. Without documents
// one set of pairs serves every batch row; with them (a DocumentMask) each row has its own.
struct Plan {
  struct Pair {
    int64_t k_tile;
    Cover cover;
  };
  std::vector<Tile> q_tiles, k_tiles;
  int64_t rows = 1;  // batch rows with pairs of their own: 1, or B with documents
  // Per (row, query tile), row-major: the key tiles not hidden, in order.
  std::vector<std::vector<Pair>> pairs;
  std::vector<int64_t> item_cost;  // per (row, query tile): scores it computes per kv head
  int64_t q_tile_count() const { return int64_t(q_tiles.size()); }
  // The pairs of query tile `q_tile` of batch row `b`.
  const std::vector<Pair>& PairsOf(int64_t b, int64_t q_tile) const {
    return pairs[size_t((rows == 1 ? 0 : b) * q_tile_count() + q_tile)];
  }
};

// The plan for query tiles of `q_tile` rows per head and key tiles of `kv_tile`, G = `group`;
// `mask` (null: plain causal) the query side's documents.
Plan MakePlan(const std::vector<int64_t>& q_positions, const std::vector<int64_t>& k_positions,
              int64_t group, int64_t q_tile, int64_t kv_tile, const DocumentMask* mask = nullptr);

// Work item i = ((b · Hk) + kv head) · (query tiles) + query tile. Cuts [0, items) into `parts`
// contiguous ranges of about equal cost; returns the part boundaries (parts + 1 of them). Integer
// arithmetic: the same cut every run.
std::vector<int64_t> SplitByCost(const Plan& plan, int64_t items, int64_t parts);

// Which of key tile `kt`'s columns the query at position `pq` (its document from `lo`) sees, as a
// range of the tile's columns, for a pair whose key tile is ascending; {−1, −1} when the tile is
// not ascending (mask element by element).
KeyRange VisibleColumns(const std::vector<int64_t>& k_positions, const Tile& kt, Cover cover,
                        int64_t lo, int64_t pq);

// Masks the scores `s` (Tk) of a non-ascending key tile for the query at `pq` whose document
// starts at `lo`: −inf where hidden.
void MaskRow(float* s, const std::vector<int64_t>& k_positions, const Tile& kt, int64_t lo,
             int64_t pq);

}  // namespace fused_cpu_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_KERNELS_FUSED_CPU_PLAN_H_
