#include "worker/engine/kernels/fused_cpu_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/kernels/attention_rows.h"
#include "worker/engine/kernels/fused_cpu_plan.h"
#include "worker/engine/kernels/fused_cpu_runtime.h"

namespace ringtrain {
namespace {

using fused_cpu_internal::ForEachItem;
using fused_cpu_internal::Gemm;
using fused_cpu_internal::Item;
using fused_cpu_internal::MakePlan;
using fused_cpu_internal::MaskRow;
using fused_cpu_internal::PartsFor;
using fused_cpu_internal::Plan;
using fused_cpu_internal::Scratch;
using fused_cpu_internal::Shape;
using fused_cpu_internal::SplitByCost;
using fused_cpu_internal::Tile;
using fused_cpu_internal::VisibleColumns;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Shape ShapeOf(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes(),
              "fused attention expects q (B,H,Lq,D) and k, v (B,Hk,Lk,D); got q ", q.sizes(),
              ", k ", k.sizes(), ", v ", v.sizes());
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                  v.scalar_type() == at::kFloat && q.device().is_cpu(),
              "the cpu_flash fused attention kernel takes float32 CPU tensors");
  Shape s{q.size(0), q.size(1), k.size(1), 0, q.size(2), k.size(2), q.size(3)};
  TORCH_CHECK(s.kv_heads > 0 && s.heads % s.kv_heads == 0, "query heads ", s.heads,
              " not a multiple of kv heads ", s.kv_heads);
  TORCH_CHECK(k.size(0) == s.batch && k.size(3) == s.dim, "q and k shapes disagree: q ", q.sizes(),
              ", k ", k.sizes());
  s.group = s.heads / s.kv_heads;
  return s;
}

// Copies the G heads' rows of query tile `qt` for (b, kv head) into `rows` ((G·Tq) × cols),
// multiplied by `mul`. `x` is (B, H, Lq, cols).
void GatherRows(const float* x, const Shape& s, int64_t b, int64_t hk, const Tile& qt, int64_t cols,
                float mul, float* rows) {
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

// The plan of a block; with documents, one set of pairs per batch row.
Plan PlanOf(const Shape& s, const BlockPositions& q_pos, const BlockPositions& k_pos,
            const FusedCpuTiling& tiling) {
  TORCH_CHECK(q_pos.mask() == nullptr || q_pos.mask()->rows() == s.batch, "document mask has ",
              q_pos.mask() == nullptr ? 0 : q_pos.mask()->rows(), " rows for a batch of ", s.batch);
  return MakePlan(q_pos.positions, k_pos.positions, s.group, tiling.q_tile, tiling.kv_tile,
                  q_pos.mask());
}

// Masks score row `row` (Tk entries) of key tile `kt` for a query at `pq` whose document starts at
// `lo`, and runs `step(first, count, visible)` on the columns that can be visible (from `first`,
// `count` of them, the first `visible` seen); the columns before `first` are zeroed after it, so
// the row's probabilities there are 0.
template <class Step>
void VisibleRow(float* row, const std::vector<int64_t>& k_positions, const Tile& kt,
                fused_cpu_internal::Cover cover, int64_t lo, int64_t pq, const Step& step) {
  const int64_t tk = kt.size();
  const KeyRange cols = VisibleColumns(k_positions, kt, cover, lo, pq);
  if (cols.first < 0) {  // not ascending: element by element
    MaskRow(row, k_positions, kt, lo, pq);
    step(int64_t{0}, tk, tk);
    return;
  }
  const int64_t first = std::min(cols.first, tk);
  step(first, tk - first, std::max<int64_t>(0, cols.last - first));
  std::fill(row, row + first, 0.0f);
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
  const Plan plan = PlanOf(s, q_pos, k_pos, tiling);
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
    const auto& pairs = plan.PairsOf(b, item.q_tile);
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
        const int64_t lo = VisibleFrom(q_pos.mask(), b, pq);
        for (int64_t g = 0; g < s.group; ++g) {
          const int64_t r = g * tq + i;
          float* row = w.s.data() + r * tk;
          VisibleRow(row, k_pos.positions, kt, pair.cover, lo, pq,
                     [&](int64_t first, int64_t n, int64_t visible) {
                       SoftmaxRowStep(row + first, n, visible, &w.row_max[size_t(r)],
                                      &w.row_sum[size_t(r)], w.a.data() + r * s.dim, s.dim);
                     });
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
  const Plan plan = PlanOf(s, q_pos, k_pos, tiling);
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
    const auto& pairs = plan.PairsOf(b, item.q_tile);
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
        const int64_t lo = VisibleFrom(q_pos.mask(), b, pq);
        for (int64_t g = 0; g < s.group; ++g) {
          const int64_t r = g * tq + i;
          float* row = p + r * tk;
          VisibleRow(row, k_pos.positions, kt, pair.cover, lo, pq,
                     [&](int64_t first, int64_t n, int64_t visible) {
                       ProbabilityRow(row + first, n, visible, w.lse[size_t(r)]);
                     });
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
  TORCH_CHECK(q.device().is_cpu(),
              "training.attention_kernel = \"cpu_flash\" runs on the CPU, "
              "not on ",
              q.device(), "; HINT: \"torch_flash\" or \"auto\" on CUDA");
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
  return absl::StrCat("cpu_flash: fused CPU (", AttentionRowsIsa(), "; tiles ",
                      size(tiling_.q_tile), "×", size(tiling_.kv_tile), ")");
}

}  // namespace ringtrain
