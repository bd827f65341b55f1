#include "worker/engine/kernels/tiled_attention.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace ringtrain {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Range {
  int64_t begin;
  int64_t end;
  int64_t size() const { return end - begin; }
};

std::vector<Range> Tiles(int64_t length, int64_t tile) {
  std::vector<Range> tiles;
  for (int64_t begin = 0; begin < length; begin += tile) {
    tiles.push_back({begin, std::min(length, begin + tile)});
  }
  return tiles;
}

// How query tile `qr` of batch row `row` sees key tile `kr` (document_mask.h's CoverOfTile).
TileCover Classify(MaskKind mask, const BlockPositions& q_pos, const BlockPositions& k_pos,
                   Range qr, Range kr, int64_t row) {
  if (mask == MaskKind::kNone) return TileCover::kFull;
  return CoverOfTile(q_pos.positions.data() + qr.begin, qr.size(),
                     k_pos.positions.data() + kr.begin, kr.size(), q_pos.mask(), row);
}

// (L,) int64: where the document of each query of batch row `row` starts (0 without documents).
at::Tensor QueryStarts(const BlockPositions& q_pos, int64_t row) {
  std::vector<int64_t> lo(q_pos.positions.size(), 0);
  for (size_t i = 0; i < lo.size(); ++i) lo[i] = VisibleFrom(q_pos.mask(), row, q_pos.positions[i]);
  return torch::tensor(lo, torch::kInt64);
}

// Shapes shared by forward and backward of one block.
struct BlockShape {
  int64_t batch, heads, kv_heads, group, lq, lk, dim;
};

BlockShape ShapeOf(const at::Tensor& q, const at::Tensor& k) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4, "attention expects 4-d q (B,H,Lq,D) and k (B,Hk,Lk,D)");
  BlockShape s{q.size(0), q.size(1), k.size(1), 0, q.size(2), k.size(2), q.size(3)};
  TORCH_CHECK(s.heads % s.kv_heads == 0, "query heads ", s.heads, " not a multiple of kv heads ",
              s.kv_heads);
  TORCH_CHECK(k.size(0) == s.batch && k.size(3) == s.dim, "q and k shapes disagree");
  s.group = s.heads / s.kv_heads;
  return s;
}

// Rows of one query tile for all G heads of each kv head: (B, H, Lq, ·) → (B, Hk, G·Tq, ·).
at::Tensor GatherQueryRows(const at::Tensor& x, const BlockShape& s, Range r) {
  return x.view({s.batch, s.kv_heads, s.group, s.lq, x.size(-1)})
      .narrow(3, r.begin, r.size())
      .reshape({s.batch, s.kv_heads, s.group * r.size(), x.size(-1)});
}

// Inverse of GatherQueryRows: writes `rows` (B, Hk, G·Tq, ·) into x (B, H, Lq, ·).
void ScatterQueryRows(at::Tensor& x, const BlockShape& s, Range r, const at::Tensor& rows) {
  x.view({s.batch, s.kv_heads, s.group, s.lq, x.size(-1)})
      .narrow(3, r.begin, r.size())
      .copy_(rows.view({s.batch, s.kv_heads, s.group, r.size(), x.size(-1)}));
}

// (G·Tq, Tk) mask, true where the key is hidden from the query: after it, or before the start of
// its document (`q_lo`).
at::Tensor HiddenMask(const at::Tensor& q_pos, const at::Tensor& q_lo, const at::Tensor& k_pos,
                      Range qr, Range kr, int64_t group) {
  const at::Tensor qp = q_pos.narrow(0, qr.begin, qr.size()).view({qr.size(), 1});
  const at::Tensor lo = q_lo.narrow(0, qr.begin, qr.size()).view({qr.size(), 1});
  const at::Tensor kp = k_pos.narrow(0, kr.begin, kr.size()).view({1, kr.size()});
  return at::logical_or(at::gt(kp, qp), at::lt(kp, lo)).repeat({group, 1});
}

// Scores of one tile pair: (B, Hk, G·Tq, Tk), masked entries −inf.
at::Tensor TileScores(const at::Tensor& q_rows, const at::Tensor& k_tile, double scale,
                      TileCover cover, const at::Tensor& q_pos, const at::Tensor& q_lo,
                      const at::Tensor& k_pos, Range qr, Range kr, int64_t group) {
  at::Tensor scores = at::matmul(q_rows, k_tile.transpose(-1, -2)).mul_(scale);
  if (cover == TileCover::kPartial) {
    scores.masked_fill_(HiddenMask(q_pos, q_lo, k_pos, qr, kr, group), kNegInf);
  }
  return scores;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

AttentionComputeTimer::AttentionComputeTimer(AttentionStats* stats)
    : stats_(stats), wall_start_(WallSeconds()), cpu_start_(ThreadCpuSeconds()) {}

AttentionComputeTimer::~AttentionComputeTimer() {
  if (stats_ == nullptr) return;
  stats_->compute_seconds += WallSeconds() - wall_start_;
  stats_->compute_cpu_seconds += ThreadCpuSeconds() - cpu_start_;
}

at::Tensor BlockPositions::AsTensor() const { return torch::tensor(positions, torch::kInt64); }

namespace {

// One block of batch rows that share their mask: all rows without documents, or batch row `row`
// alone (q, k, v narrowed to it) with them.
BlockOutput ForwardRows(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const BlockPositions& q_pos, const BlockPositions& k_pos, MaskKind mask,
                        double scale, const AttentionTiling& tiling, int64_t row) {
  const BlockShape s = ShapeOf(q, k);
  TORCH_CHECK(static_cast<int64_t>(q_pos.positions.size()) == s.lq &&
                  static_cast<int64_t>(k_pos.positions.size()) == s.lk,
              "attention positions do not match the sequence lengths");
  at::Tensor out = at::zeros({s.batch, s.heads, s.lq, s.dim}, q.options());
  at::Tensor lse = at::full({s.batch, s.heads, s.lq, 1}, kNegInf, q.options());
  const at::Tensor q_pos_t = q_pos.AsTensor().to(q.device());
  const at::Tensor q_lo_t = QueryStarts(q_pos, row).to(q.device());
  const at::Tensor k_pos_t = k_pos.AsTensor().to(q.device());
  const std::vector<Range> k_tiles = Tiles(s.lk, tiling.kv_tile);
  int64_t scores_computed = 0;

  for (const Range qr : Tiles(s.lq, tiling.q_tile)) {
    at::Tensor q_rows;  // gathered lazily: a fully hidden query tile costs nothing
    at::Tensor acc, row_max, row_sum;
    for (const Range kr : k_tiles) {
      const TileCover cover = Classify(mask, q_pos, k_pos, qr, kr, row);
      if (cover == TileCover::kHidden) continue;
      if (!q_rows.defined()) {
        q_rows = GatherQueryRows(q, s, qr);
        acc = at::zeros_like(q_rows);
        row_max = at::full({s.batch, s.kv_heads, q_rows.size(2), 1}, kNegInf, q.options());
        row_sum = at::zeros_like(row_max);
      }
      const at::Tensor k_tile = k.narrow(2, kr.begin, kr.size());
      const at::Tensor v_tile = v.narrow(2, kr.begin, kr.size());
      scores_computed += s.batch * s.heads * qr.size() * kr.size();
      at::Tensor scores =
          TileScores(q_rows, k_tile, scale, cover, q_pos_t, q_lo_t, k_pos_t, qr, kr, s.group);
      const at::Tensor new_max = at::maximum(row_max, std::get<0>(scores.max(-1, true)));
      // A row with nothing visible yet keeps max −inf; shift by 0 there so exp gives 0, not NaN.
      const at::Tensor shift = at::where(at::isinf(new_max), at::zeros_like(new_max), new_max);
      const at::Tensor probs = scores.sub_(shift).exp_();
      const at::Tensor rescale = (row_max - shift).exp_();
      row_sum.mul_(rescale).add_(probs.sum(-1, true));
      acc.mul_(rescale).add_(at::matmul(probs, v_tile));
      row_max = new_max;
    }
    if (!q_rows.defined()) continue;
    const at::Tensor visible = row_sum > 0;
    const at::Tensor out_rows = at::where(
        visible, acc / at::where(visible, row_sum, at::ones_like(row_sum)), at::zeros_like(acc));
    const at::Tensor lse_rows = at::where(visible, row_max + row_sum.log(), row_max);
    ScatterQueryRows(out, s, qr, out_rows);
    ScatterQueryRows(lse, s, qr, lse_rows);
  }
  return {out, lse.squeeze(-1), scores_computed};
}

BlockGrads BackwardRows(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& dout, const at::Tensor& delta, const at::Tensor& lse,
                        const BlockPositions& q_pos, const BlockPositions& k_pos, MaskKind mask,
                        double scale, const AttentionTiling& tiling, int64_t row) {
  const BlockShape s = ShapeOf(q, k);
  at::Tensor dq = at::zeros_like(q);
  at::Tensor dk = at::zeros_like(k);
  at::Tensor dv = at::zeros_like(v);
  const at::Tensor q_pos_t = q_pos.AsTensor().to(q.device());
  const at::Tensor q_lo_t = QueryStarts(q_pos, row).to(q.device());
  const at::Tensor k_pos_t = k_pos.AsTensor().to(q.device());
  // Rows that saw no key anywhere have lse −inf and no visible scores; subtract 0 there instead.
  const at::Tensor lse_safe = at::where(at::isinf(lse), at::zeros_like(lse), lse).unsqueeze(-1);
  const at::Tensor delta4 = delta.unsqueeze(-1);
  const std::vector<Range> k_tiles = Tiles(s.lk, tiling.kv_tile);

  for (const Range qr : Tiles(s.lq, tiling.q_tile)) {
    at::Tensor q_rows, dout_rows, lse_rows, delta_rows, dq_rows;
    for (const Range kr : k_tiles) {
      const TileCover cover = Classify(mask, q_pos, k_pos, qr, kr, row);
      if (cover == TileCover::kHidden) continue;
      if (!q_rows.defined()) {
        q_rows = GatherQueryRows(q, s, qr);
        dout_rows = GatherQueryRows(dout, s, qr);
        lse_rows = GatherQueryRows(lse_safe, s, qr);
        delta_rows = GatherQueryRows(delta4, s, qr);
        dq_rows = at::zeros_like(q_rows);
      }
      const at::Tensor k_tile = k.narrow(2, kr.begin, kr.size());
      const at::Tensor v_tile = v.narrow(2, kr.begin, kr.size());
      at::Tensor scores =
          TileScores(q_rows, k_tile, scale, cover, q_pos_t, q_lo_t, k_pos_t, qr, kr, s.group);
      const at::Tensor probs = scores.sub_(lse_rows).exp_();  // (B, Hk, G·Tq, Tk)
      dv.narrow(2, kr.begin, kr.size()).add_(at::matmul(probs.transpose(-1, -2), dout_rows));
      at::Tensor dscores = at::matmul(dout_rows, v_tile.transpose(-1, -2));  // dP
      dscores.sub_(delta_rows).mul_(probs).mul_(scale);                      // dS · scale
      dq_rows.add_(at::matmul(dscores, k_tile));
      dk.narrow(2, kr.begin, kr.size()).add_(at::matmul(dscores.transpose(-1, -2), q_rows));
    }
    if (dq_rows.defined()) ScatterQueryRows(dq, s, qr, dq_rows);
  }
  return {dq, dk, dv};
}

at::Tensor Row(const at::Tensor& x, int64_t b) { return x.narrow(0, b, 1); }

}  // namespace

BlockOutput AttentionBlockForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const BlockPositions& q_pos, const BlockPositions& k_pos,
                                  MaskKind mask, double scale, const AttentionTiling& tiling) {
  if (q_pos.mask() == nullptr || mask == MaskKind::kNone) {
    return ForwardRows(q, k, v, q_pos, k_pos, mask, scale, tiling, 0);
  }
  // Documents differ from row to row: each row its own tiles.
  TORCH_CHECK(q_pos.mask()->rows() == q.size(0), "document mask has ", q_pos.mask()->rows(),
              " rows for a batch of ", q.size(0));
  std::vector<at::Tensor> outs, lses;
  int64_t scores = 0;
  for (int64_t b = 0; b < q.size(0); ++b) {
    BlockOutput r =
        ForwardRows(Row(q, b), Row(k, b), Row(v, b), q_pos, k_pos, mask, scale, tiling, b);
    outs.push_back(r.out);
    lses.push_back(r.lse);
    scores += r.scores_computed;
  }
  return {at::cat(outs), at::cat(lses), scores};
}

BlockGrads AttentionBlockBackward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& dout, const at::Tensor& delta,
                                  const at::Tensor& lse, const BlockPositions& q_pos,
                                  const BlockPositions& k_pos, MaskKind mask, double scale,
                                  const AttentionTiling& tiling) {
  if (q_pos.mask() == nullptr || mask == MaskKind::kNone) {
    return BackwardRows(q, k, v, dout, delta, lse, q_pos, k_pos, mask, scale, tiling, 0);
  }
  std::vector<at::Tensor> dq, dk, dv;
  for (int64_t b = 0; b < q.size(0); ++b) {
    BlockGrads g = BackwardRows(Row(q, b), Row(k, b), Row(v, b), Row(dout, b), Row(delta, b),
                                Row(lse, b), q_pos, k_pos, mask, scale, tiling, b);
    dq.push_back(g.dq);
    dk.push_back(g.dk);
    dv.push_back(g.dv);
  }
  return {at::cat(dq), at::cat(dk), at::cat(dv)};
}

namespace {

// MergeBlockInto on the CPU in one pass over the rows, in place (float32, contiguous, the block the
// same shape): the ATen chain reads and writes the whole output about ten times, a real share of
// a ring step. Rows are independent, so the result does not depend on the thread count.
bool MergeRowsOnCpu(at::Tensor& out, at::Tensor& lse, const BlockOutput& block) {
  const auto f32_cpu = [](const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat;
  };
  if (!f32_cpu(out) || !f32_cpu(lse) || !f32_cpu(block.out) || !f32_cpu(block.lse) ||
      !out.is_contiguous() || !lse.is_contiguous() || block.out.sizes() != out.sizes() ||
      block.lse.sizes() != lse.sizes() || out.dim() != lse.dim() + 1 ||
      lse.numel() * out.size(-1) != out.numel()) {
    return false;
  }
  const at::Tensor block_out = block.out.contiguous(), block_lse = block.lse.contiguous();
  const int64_t dim = out.size(-1);
  float* o = out.data_ptr<float>();
  float* l = lse.data_ptr<float>();
  const float* bo = block_out.data_ptr<float>();
  const float* bl = block_lse.data_ptr<float>();
  at::parallel_for(0, lse.numel(), 256, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      // logaddexp as ATen computes it (a NaN stays NaN); both −inf (no key visible in either)
      // keeps the row empty.
      const float a = l[r], b = bl[r];
      const float merged =
          std::isinf(a) && a == b ? a : std::max(a, b) + std::log1p(std::exp(-std::fabs(a - b)));
      float* row = o + r * dim;
      const float* block_row = bo + r * dim;
      if (std::isinf(merged)) {
        std::fill_n(row, dim, 0.0f);
      } else {
        const float w_old = std::exp(a - merged), w_new = std::exp(b - merged);
        for (int64_t d = 0; d < dim; ++d) row[d] = row[d] * w_old + block_row[d] * w_new;
      }
      l[r] = merged;
    }
  });
  return true;
}

}  // namespace

void MergeBlockInto(at::Tensor& out, at::Tensor& lse, const BlockOutput& block) {
  if (MergeRowsOnCpu(out, lse, block)) return;
  const at::Tensor new_lse = at::logaddexp(lse, block.lse);
  // Both −inf: logaddexp gives −inf and the weights below would be NaN; keep such rows at zero.
  const at::Tensor empty = at::isinf(new_lse).unsqueeze(-1);
  const at::Tensor safe = at::where(at::isinf(new_lse), at::zeros_like(new_lse), new_lse);
  const at::Tensor w_old = (lse - safe).exp().unsqueeze(-1);
  const at::Tensor w_new = (block.lse - safe).exp().unsqueeze(-1);
  out = at::where(empty, at::zeros_like(out), out * w_old + block.out * w_new);
  lse = new_lse;
}

at::Tensor AttentionDelta(const at::Tensor& dout, const at::Tensor& out) {
  return (dout * out).sum(-1);
}

}  // namespace ringtrain
