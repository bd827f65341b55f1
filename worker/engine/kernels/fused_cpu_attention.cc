#include "worker/engine/kernels/fused_cpu_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/kernels/attention_rows.h"

// Fortran BLAS single-precision GEMM (column-major). The pinned LibTorch's CPU library carries MKL
// and exports it (the link fails on a LibTorch without it).
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);
// MKL's per-thread thread count (returns the previous one; 0 = the global setting).
extern "C" int MKL_Set_Num_Threads_Local(int threads);  // mkl_set_num_threads_local in C

namespace ringtrain {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Row-major C (m×n, leading dim ldc) = op(A) · op(B) + beta · C, with op(A) m×k and op(B) k×n;
// `trans_a` means A is stored k×m (row-major, leading dim lda). Row-major C = A·B is column-major
// Cᵀ = Bᵀ·Aᵀ, and a row-major matrix read column-major is its transpose: so B and A swap places
// and keep their flags.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int im = int(m), in = int(n), ik = int(k), ilda = int(lda), ildb = int(ldb),
            ildc = int(ldc);
  const float one = 1.0f;
  sgemm_(&tb, &ta, &in, &im, &ik, &one, b, &ildb, a, &ilda, &beta, c, &ildc);
}

// One MKL thread for the GEMMs of this thread while alive: each intra-op thread computes its own
// tiles, and LibTorch leaves MKL free to start a team of its own inside ours (measured: 2 threads
// ran slower than 1 at head dim 32).
class SequentialBlas {
 public:
  SequentialBlas() : saved_(MKL_Set_Num_Threads_Local(1)) {}
  ~SequentialBlas() { MKL_Set_Num_Threads_Local(saved_); }

 private:
  int saved_;
};

// Flush-to-zero and denormals-are-zero on this thread while alive; the old mode after.
class DenormalsAreZero {
 public:
#if defined(__x86_64__)
  DenormalsAreZero() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040); }
  ~DenormalsAreZero() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

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

enum class Cover { kHidden, kFull, kPartial };

Cover CoverOf(const Tile& q, const Tile& k) {
  if (k.min_pos > q.max_pos) return Cover::kHidden;
  if (k.max_pos <= q.min_pos) return Cover::kFull;
  return Cover::kPartial;
}

struct Shape {
  int64_t batch, heads, kv_heads, group, lq, lk, dim;
};

Shape ShapeOf(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes(),
              "fused attention expects q (B,H,Lq,D) and k, v (B,Hk,Lk,D); got q ", q.sizes(),
              ", k ", k.sizes(), ", v ", v.sizes());
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                  v.scalar_type() == at::kFloat && q.device().is_cpu(),
              "the ringtrain fused attention kernel takes float32 CPU tensors");
  Shape s{q.size(0), q.size(1), k.size(1), 0, q.size(2), k.size(2), q.size(3)};
  TORCH_CHECK(s.kv_heads > 0 && s.heads % s.kv_heads == 0, "query heads ", s.heads,
              " not a multiple of kv heads ", s.kv_heads);
  TORCH_CHECK(k.size(0) == s.batch && k.size(3) == s.dim, "q and k shapes disagree: q ", q.sizes(),
              ", k ", k.sizes());
  s.group = s.heads / s.kv_heads;
  return s;
}

// The block's tiles, which key tiles each query tile sees, and the work items.
struct Plan {
  struct Pair {
    int64_t k_tile;
    Cover cover;
  };
  std::vector<Tile> q_tiles, k_tiles;
  std::vector<std::vector<Pair>> pairs;  // per query tile, the key tiles not hidden, in order
  std::vector<int64_t> item_cost;        // per query tile: scores it computes per (b, kv head)
  int64_t q_tile_count() const { return int64_t(q_tiles.size()); }
};

Plan MakePlan(const BlockPositions& q_pos, const BlockPositions& k_pos, const Shape& s,
              FusedCpuTiling tiling) {
  Plan plan;
  plan.q_tiles = MakeTiles(q_pos.positions, tiling.q_tile);
  plan.k_tiles = MakeTiles(k_pos.positions, tiling.kv_tile);
  for (const Tile& qt : plan.q_tiles) {
    std::vector<Plan::Pair> pairs;
    int64_t cost = 0;
    for (int64_t j = 0; j < int64_t(plan.k_tiles.size()); ++j) {
      const Cover cover = CoverOf(qt, plan.k_tiles[size_t(j)]);
      if (cover == Cover::kHidden) continue;
      pairs.push_back({j, cover});
      cost += s.group * qt.size() * plan.k_tiles[size_t(j)].size();
    }
    plan.pairs.push_back(std::move(pairs));
    plan.item_cost.push_back(cost);
  }
  return plan;
}

// Work item i = ((b · Hk) + kv head) · (query tiles) + query tile. Cuts [0, items) into `parts`
// contiguous ranges of about equal cost; returns the part boundaries (parts + 1 of them).
std::vector<int64_t> SplitByCost(const Plan& plan, int64_t items, int64_t parts) {
  const int64_t tiles = plan.q_tile_count();
  auto cost = [&](int64_t item) { return plan.item_cost[size_t(item % tiles)] + 1; };
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

int64_t PartsFor(int64_t items) {
  return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), items));
}

// How many of key tile `kt`'s columns the query at position `pq` sees, for a partial pair whose key
// tile is ascending (a prefix); −1 when the tile is not ascending (mask element by element).
int64_t VisiblePrefix(const std::vector<int64_t>& k_positions, const Tile& kt, Cover cover,
                      int64_t pq) {
  if (cover == Cover::kFull) return kt.size();
  if (!kt.ascending) return -1;
  const auto first = k_positions.begin() + kt.begin, last = k_positions.begin() + kt.end;
  return std::upper_bound(first, last, pq) - first;
}

// Masks the scores of a non-ascending key tile for the query at `pq`: −inf where hidden.
void MaskRow(float* s, const std::vector<int64_t>& k_positions, const Tile& kt, int64_t pq) {
  for (int64_t j = 0; j < kt.size(); ++j) {
    if (k_positions[size_t(kt.begin + j)] > pq) s[j] = kNegInf;
  }
}

// Per-thread scratch, sized for the largest tiles.
struct Scratch {
  Scratch(int64_t rows, int64_t cols, int64_t dim)
      : q(size_t(rows * dim)), s(size_t(rows * cols)), p2(size_t(rows * cols)),
        a(size_t(rows * dim)), b(size_t(rows * dim)), row_max(size_t(rows)), row_sum(size_t(rows)),
        lse(size_t(rows)), delta(size_t(rows)) {}
  std::vector<float> q, s, p2, a, b;
  std::vector<float> row_max, row_sum;  // forward: the online softmax's running max and sum
  std::vector<float> lse, delta;        // backward: the final statistics of the rows
};

// Copies the G heads' rows of query tile `qt` for (b, kv head) into `rows` ((G·Tq) × cols),
// multiplied by `mul`. `x` is (B, H, Lq, cols).
void GatherRows(const float* x, const Shape& s, int64_t b, int64_t hk, const Tile& qt,
                int64_t cols, float mul, float* rows) {
  const int64_t tq = qt.size();
  for (int64_t g = 0; g < s.group; ++g) {
    const float* src = x + ((b * s.heads + hk * s.group + g) * s.lq + qt.begin) * cols;
    float* dst = rows + g * tq * cols;
    if (mul == 1.0f) {
      std::copy(src, src + tq * cols, dst);
    } else {
      for (int64_t i = 0; i < tq * cols; ++i) dst[i] = src[i] * mul;
    }
  }
}

// One work item: batch b, kv head, query tile (item i = ((b · Hk) + kv head) · tiles + tile).
struct Item {
  int64_t b, kv_head, q_tile;
};

// Calls fn(part, item, scratch) for every item, the items of each part in order on one intra-op
// thread, with flush-to-zero set and MKL sequential there, and one Scratch per thread.
template <class Fn>
void ForEachItem(const Plan& plan, const Shape& s, const std::vector<int64_t>& bounds,
                 int64_t parts, const FusedCpuTiling& tiling, const Fn& fn) {
  const int64_t tiles = plan.q_tile_count();
  at::parallel_for(0, parts, 1, [&](int64_t part_begin, int64_t part_end) {
    DenormalsAreZero daz;
    SequentialBlas sequential;
    Scratch scratch(s.group * tiling.q_tile, tiling.kv_tile, s.dim);
    for (int64_t part = part_begin; part < part_end; ++part) {
      for (int64_t i = bounds[size_t(part)]; i < bounds[size_t(part + 1)]; ++i) {
        fn(part, Item{i / (tiles * s.kv_heads), (i / tiles) % s.kv_heads, i % tiles}, scratch);
      }
    }
  });
}

}  // namespace

FusedCpuTiling FusedCpuTilingFor(int64_t dim, int64_t group, FusedCpuTiling requested) {
  // Key tiles of 256 (128 at head dim > 64) and about 128 stacked query rows: the score tile
  // (128 × Tk floats), its probability twin in backward, and one K and V tile stay within half
  // of a 512 KiB L2.
  FusedCpuTiling t = requested;
  if (t.kv_tile <= 0) t.kv_tile = dim > 64 ? 128 : 256;
  if (t.q_tile <= 0) t.q_tile = std::max<int64_t>(16, 128 / std::max<int64_t>(1, group));
  return t;
}

BlockOutput FusedCpuAttentionForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const BlockPositions& q_pos, const BlockPositions& k_pos,
                                     double scale, FusedCpuTiling tiling) {
  const Shape s = ShapeOf(q, k, v);
  TORCH_CHECK(int64_t(q_pos.positions.size()) == s.lq && int64_t(k_pos.positions.size()) == s.lk,
              "attention positions do not match the sequence lengths");
  tiling = FusedCpuTilingFor(s.dim, s.group, tiling);
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  at::Tensor out = at::zeros({s.batch, s.heads, s.lq, s.dim}, q.options());
  at::Tensor lse = at::full({s.batch, s.heads, s.lq}, kNegInf, q.options());
  if (s.lq == 0 || s.lk == 0) return {out, lse, 0};
  const Plan plan = MakePlan(q_pos, k_pos, s, tiling);
  const int64_t items = s.batch * s.kv_heads * plan.q_tile_count();
  const int64_t parts = PartsFor(items);
  const std::vector<int64_t> bounds = SplitByCost(plan, items, parts);
  std::vector<int64_t> scores(size_t(parts), 0);
  const float* qp = qc.data_ptr<float>();
  const float* kp = kc.data_ptr<float>();
  const float* vp = vc.data_ptr<float>();
  float* outp = out.data_ptr<float>();
  float* lsep = lse.data_ptr<float>();
  const float fscale = float(scale);

  ForEachItem(plan, s, bounds, parts, tiling, [&](int64_t part, const Item& item, Scratch& w) {
    const int64_t b = item.b, hk = item.kv_head;
    const Tile& qt = plan.q_tiles[size_t(item.q_tile)];
    const auto& pairs = plan.pairs[size_t(item.q_tile)];
    if (pairs.empty()) return;  // out 0, lse −inf already
    const int64_t tq = qt.size(), rows = s.group * tq;
    GatherRows(qp, s, b, hk, qt, s.dim, fscale, w.q.data());
    std::fill(w.a.begin(), w.a.begin() + rows * s.dim, 0.0f);
    std::fill(w.row_max.begin(), w.row_max.begin() + rows, kNegInf);
    std::fill(w.row_sum.begin(), w.row_sum.begin() + rows, 0.0f);
    for (const Plan::Pair& pair : pairs) {
      const Tile& kt = plan.k_tiles[size_t(pair.k_tile)];
      const int64_t tk = kt.size();
      const float* k_tile = kp + ((b * s.kv_heads + hk) * s.lk + kt.begin) * s.dim;
      const float* v_tile = vp + ((b * s.kv_heads + hk) * s.lk + kt.begin) * s.dim;
      Gemm(false, true, rows, tk, s.dim, w.q.data(), s.dim, k_tile, s.dim, 0.0f, w.s.data(),
           tk);  // S = (scale·Q) Kᵀ
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t pq = q_pos.positions[size_t(qt.begin + i)];
        const int64_t prefix = VisiblePrefix(k_pos.positions, kt, pair.cover, pq);
        for (int64_t g = 0; g < s.group; ++g) {
          const int64_t r = g * tq + i;
          float* row = w.s.data() + r * tk;
          if (prefix < 0) MaskRow(row, k_pos.positions, kt, pq);
          SoftmaxRowStep(row, tk, prefix < 0 ? tk : prefix, &w.row_max[size_t(r)],
                         &w.row_sum[size_t(r)], w.a.data() + r * s.dim, s.dim);
        }
      }
      Gemm(false, false, rows, s.dim, tk, w.s.data(), tk, v_tile, s.dim, 1.0f, w.a.data(),
           s.dim);  // O += P V
      scores[size_t(part)] += rows * tk;
    }
    for (int64_t g = 0; g < s.group; ++g) {
      const int64_t head = hk * s.group + g;
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t r = g * tq + i;
        const int64_t row = (b * s.heads + head) * s.lq + qt.begin + i;
        const float sum = w.row_sum[size_t(r)];
        if (sum <= 0.0f) continue;  // saw no key: out 0, lse −inf
        const float* acc = w.a.data() + r * s.dim;
        float* dst = outp + row * s.dim;
        const float inv = 1.0f / sum;
        for (int64_t d = 0; d < s.dim; ++d) dst[d] = acc[d] * inv;
        lsep[row] = w.row_max[size_t(r)] + std::log(sum);
      }
    }
  });
  int64_t total = 0;
  for (int64_t n : scores) total += n;
  return {out, lse, total};
}

BlockGrads FusedCpuAttentionBackward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& dout, const at::Tensor& delta,
                                     const at::Tensor& lse, const BlockPositions& q_pos,
                                     const BlockPositions& k_pos, double scale,
                                     FusedCpuTiling tiling) {
  const Shape s = ShapeOf(q, k, v);
  tiling = FusedCpuTilingFor(s.dim, s.group, tiling);
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const at::Tensor doc = dout.to(at::kFloat).contiguous();
  const at::Tensor lsec = lse.to(at::kFloat).contiguous();
  const at::Tensor deltac = delta.to(at::kFloat).contiguous();
  at::Tensor dq = at::zeros_like(qc), dk = at::zeros_like(kc), dv = at::zeros_like(vc);
  if (s.lq == 0 || s.lk == 0) return {dq, dk, dv};
  const Plan plan = MakePlan(q_pos, k_pos, s, tiling);
  const int64_t items = s.batch * s.kv_heads * plan.q_tile_count();
  const int64_t parts = PartsFor(items);
  const std::vector<int64_t> bounds = SplitByCost(plan, items, parts);
  // Part 0 accumulates dK/dV in the result; every other part in a buffer of its own.
  std::vector<at::Tensor> dk_parts = {dk}, dv_parts = {dv};
  for (int64_t part = 1; part < parts; ++part) {
    dk_parts.push_back(at::zeros_like(kc));
    dv_parts.push_back(at::zeros_like(vc));
  }
  const float* qp = qc.data_ptr<float>();
  const float* kp = kc.data_ptr<float>();
  const float* vp = vc.data_ptr<float>();
  const float* dop = doc.data_ptr<float>();
  const float* lsep = lsec.data_ptr<float>();
  const float* deltap = deltac.data_ptr<float>();
  float* dqp = dq.data_ptr<float>();
  const float fscale = float(scale);

  ForEachItem(plan, s, bounds, parts, tiling, [&](int64_t part, const Item& item, Scratch& w) {
    const int64_t b = item.b, hk = item.kv_head;
    float* dkp = dk_parts[size_t(part)].data_ptr<float>();
    float* dvp = dv_parts[size_t(part)].data_ptr<float>();
    const Tile& qt = plan.q_tiles[size_t(item.q_tile)];
    const auto& pairs = plan.pairs[size_t(item.q_tile)];
    if (pairs.empty()) return;
    const int64_t tq = qt.size(), rows = s.group * tq;
    GatherRows(qp, s, b, hk, qt, s.dim, fscale, w.q.data());  // scale·Q
    GatherRows(dop, s, b, hk, qt, s.dim, 1.0f, w.a.data());   // dO
    GatherRows(lsep, s, b, hk, qt, 1, 1.0f, w.lse.data());
    GatherRows(deltap, s, b, hk, qt, 1, 1.0f, w.delta.data());
    std::fill(w.b.begin(), w.b.begin() + rows * s.dim, 0.0f);  // dQ / scale
    for (const Plan::Pair& pair : pairs) {
      const Tile& kt = plan.k_tiles[size_t(pair.k_tile)];
      const int64_t tk = kt.size();
      const int64_t kv_offset = ((b * s.kv_heads + hk) * s.lk + kt.begin) * s.dim;
      const float* k_tile = kp + kv_offset;
      const float* v_tile = vp + kv_offset;
      float* p = w.s.data();
      float* ds = w.p2.data();
      Gemm(false, true, rows, tk, s.dim, w.q.data(), s.dim, k_tile, s.dim, 0.0f, p, tk);
      for (int64_t i = 0; i < tq; ++i) {
        const int64_t pq = q_pos.positions[size_t(qt.begin + i)];
        const int64_t prefix = VisiblePrefix(k_pos.positions, kt, pair.cover, pq);
        for (int64_t g = 0; g < s.group; ++g) {
          const int64_t r = g * tq + i;
          if (prefix < 0) MaskRow(p + r * tk, k_pos.positions, kt, pq);
          ProbabilityRow(p + r * tk, tk, prefix < 0 ? tk : prefix, w.lse[size_t(r)]);
        }
      }
      Gemm(true, false, tk, s.dim, rows, p, tk, w.a.data(), s.dim, 1.0f, dvp + kv_offset,
           s.dim);  // dV += Pᵀ dO
      Gemm(false, true, rows, tk, s.dim, w.a.data(), s.dim, v_tile, s.dim, 0.0f, ds,
           tk);  // dP = dO Vᵀ
      for (int64_t r = 0; r < rows; ++r) {
        ScoreGradRow(ds + r * tk, p + r * tk, tk, w.delta[size_t(r)]);  // dS
      }
      Gemm(false, false, rows, s.dim, tk, ds, tk, k_tile, s.dim, 1.0f, w.b.data(),
           s.dim);  // dQ/scale += dS K
      Gemm(true, false, tk, s.dim, rows, ds, tk, w.q.data(), s.dim, 1.0f, dkp + kv_offset,
           s.dim);  // dK += dSᵀ (scale·Q)
    }
    for (int64_t g = 0; g < s.group; ++g) {
      const int64_t head = hk * s.group + g;
      float* dst = dqp + ((b * s.heads + head) * s.lq + qt.begin) * s.dim;
      const float* src = w.b.data() + g * tq * s.dim;
      for (int64_t i = 0; i < tq * s.dim; ++i) dst[i] = src[i] * fscale;
    }
  });
  for (int64_t part = 1; part < parts; ++part) {  // in part order: the same sum every run
    dk.add_(dk_parts[size_t(part)]);
    dv.add_(dv_parts[size_t(part)]);
  }
  return {dq, dk, dv};
}

BlockOutput FusedCpuBlockKernel::Forward(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const BlockPositions& q_pos,
                                         const BlockPositions& k_pos, double scale) {
  if (q.scalar_type() == at::kDouble) return float64_.Forward(q, k, v, q_pos, k_pos, scale);
  TORCH_CHECK(q.device().is_cpu(), "training.attention_kernel = \"ringtrain\" runs on the CPU, "
              "not on ", q.device(), "; HINT: \"torch_flash\" or \"auto\" on CUDA");
  return FusedCpuAttentionForward(Widen(q), Widen(k), Widen(v), q_pos, k_pos, scale, tiling_);
}

BlockGrads FusedCpuBlockKernel::Backward(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& dout,
                                         const FinalStats& final, const BlockPositions& q_pos,
                                         const BlockPositions& k_pos, double scale) {
  if (q.scalar_type() == at::kDouble) {
    return float64_.Backward(q, k, v, dout, final, q_pos, k_pos, scale);
  }
  return FusedCpuAttentionBackward(Widen(q), Widen(k), Widen(v), Widen(dout), final.delta(),
                                   final.lse, q_pos, k_pos, scale, tiling_);
}

std::string FusedCpuBlockKernel::Describe() const {
  const auto size = [](int64_t n) { return n > 0 ? absl::StrCat(n) : std::string("auto"); };
  return absl::StrCat("ringtrain fused CPU (", AttentionRowsIsa(), "; tiles ",
                      size(tiling_.q_tile), "×", size(tiling_.kv_tile), ")");
}

void FlushDenormalsOnComputeThreads() {
#if defined(__x86_64__)
  _mm_setcsr(_mm_getcsr() | 0x8040);
  const int64_t threads = at::get_num_threads();
  at::parallel_for(0, threads, 1, [](int64_t, int64_t) { _mm_setcsr(_mm_getcsr() | 0x8040); });
#endif
}

}  // namespace ringtrain
