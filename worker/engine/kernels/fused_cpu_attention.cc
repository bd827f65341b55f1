#include "worker/engine/kernels/fused_cpu_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/kernels/attention_rows.h"
#include "worker/engine/kernels/fused_cpu_plan.h"
#include "worker/engine/kernels/fused_cpu_runtime.h"

namespace ringtrain {
namespace {

using fused_cpu_internal::ForEachItem;
using fused_cpu_internal::Gemm;
using fused_cpu_internal::GemmBf16;
using fused_cpu_internal::GemmBrgemm;
using fused_cpu_internal::Item;
using fused_cpu_internal::MakePlan;
using fused_cpu_internal::MaskRow;
using fused_cpu_internal::PartsFor;
using fused_cpu_internal::Plan;
using fused_cpu_internal::Scratch;
using fused_cpu_internal::ScratchKind;
using fused_cpu_internal::Shape;
using fused_cpu_internal::SplitByCost;
using fused_cpu_internal::Tile;
using fused_cpu_internal::VisibleColumns;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Shape ShapeOf(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes(),
              "fused attention expects q (B,H,Lq,D) and k, v (B,Hk,Lk,D); got q ", q.sizes(),
              ", k ", k.sizes(), ", v ", v.sizes());
  TORCH_CHECK((q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16) &&
                  k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() &&
                  q.device().is_cpu(),
              "the cpu_flash fused attention kernel takes float32 or bfloat16 CPU tensors, all of "
              "one dtype; got q ",
              q.scalar_type(), ", k ", k.scalar_type(), ", v ", v.scalar_type());
  Shape s{q.size(0), q.size(1), k.size(1), 0, q.size(2), k.size(2), q.size(3)};
  TORCH_CHECK(s.kv_heads > 0 && s.heads % s.kv_heads == 0, "query heads ", s.heads,
              " not a multiple of kv heads ", s.kv_heads);
  TORCH_CHECK(k.size(0) == s.batch && k.size(3) == s.dim, "q and k shapes disagree: q ", q.sizes(),
              ", k ", k.sizes());
  s.group = s.heads / s.kv_heads;
  return s;
}

// Copies the G heads' rows of query tile `qt` for (b, kv head) into `rows` ((G·Tq) × cols),
// multiplied by `mul` (float32 only). `x` is (B, H, Lq, cols).
template <typename T>
void GatherRows(const T* x, const Shape& s, int64_t b, int64_t hk, const Tile& qt, int64_t cols,
                float mul, T* rows) {
  const int64_t tq = qt.size();
  for (int64_t g = 0; g < s.group; ++g) {
    const T* src = x + ((b * s.heads + hk * s.group + g) * s.lq + qt.begin) * cols;
    T* dst = rows + g * tq * cols;
    if constexpr (std::is_same_v<T, float>) {
      if (mul != 1.0f) {
        for (int64_t i = 0; i < tq * cols; ++i) dst[i] = src[i] * mul;
        continue;
      }
    }
    std::copy(src, src + tq * cols, dst);
  }
}

// The element pointer of a float32 tensor, or the 16 bits of a bfloat16 one.
template <typename T>
const T* DataOf(const at::Tensor& t) {
  if constexpr (std::is_same_v<T, float>) {
    return t.data_ptr<float>();
  } else {
    return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
  }
}

// Where key tile `kt` of (batch b, kv head hk) lies: `rows`, the offset of its first row in K and V
// (B, Hk, Lk, D); `cols`, the offset of its first column in their transposes (B, Hk, D, Lk), which
// the BRGeMM GEMMs take (their B operand is never transposed); `size`, Tk.
struct KvTileAt {
  int64_t rows, cols, size;
};

KvTileAt TileAt(const Shape& s, int64_t b, int64_t hk, const Tile& kt) {
  const int64_t head = b * s.kv_heads + hk;
  return {(head * s.lk + kt.begin) * s.dim, head * s.dim * s.lk + kt.begin, kt.size()};
}

// The GEMMs of the two kinds of input. float32: sgemm or BRGeMM (F32Gemm), with scale·Q gathered.
// BRGeMM multiplies untransposed operands only, so it reads Kᵀ and Vᵀ (transposed once per call)
// and accumulates dKᵀ and dVᵀ (transposed back once) from the row blocks' transposes. bfloat16:
// bfloat16 operands with float32 accumulation, Q gathered as it is and the scale passed as the
// GEMMs' alpha; the row functions write the probabilities P and score gradients dS rounded to
// bfloat16 into p16 (Row16) for the GEMMs that take them, as FlashAttention does. `grad` below is
// dK's or dV's whole accumulator, (B, Hk, D, Lk) where Transposed(), else (B, Hk, Lk, D).
template <typename T>
struct Gemms;

template <>
struct Gemms<float> {
  static constexpr bool kBf16 = false;
  // `backward`: Vᵀ too (for dP).
  Gemms(float scale, F32Gemm engine, const at::Tensor& k, const at::Tensor& v, bool backward)
      : scale(scale),
        brgemm(engine == F32Gemm::kBrgemm),
        lk(k.size(2)),
        k(k.data_ptr<float>()),
        v(v.data_ptr<float>()) {
    if (!brgemm) return;
    k_t_ = k.transpose(2, 3).contiguous();
    k_t = k_t_.data_ptr<float>();
    if (backward) {
      v_t_ = v.transpose(2, 3).contiguous();
      v_t = v_t_.data_ptr<float>();
    }
  }
  float scale;
  bool brgemm;
  int64_t lk;
  const float *k, *v;
  const float *k_t = nullptr, *v_t = nullptr;
  at::Tensor k_t_, v_t_;

  ScratchKind Kind(bool backward) const { return {false, brgemm && backward}; }
  bool Transposed() const { return brgemm; }
  float* QRows(Scratch& w) const { return w.q.data(); }
  float* DoRows(Scratch& w) const { return w.a.data(); }
  float QMul() const { return scale; }  // the gathered Q is scale·Q
  // Where the row functions round P or dS to: nowhere, the GEMMs take the float rows.
  uint16_t* Row16(Scratch&, int64_t) const { return nullptr; }
  // The P or dS tile the GEMMs take, given the float one.
  const float* Tile(Scratch&, const float* p) const { return p; }
  // Backward, after the rows are gathered: BRGeMM's transposes of scale·Q and dO.
  void TransposeRows(Scratch& w, int64_t rows, int64_t dim) const {
    if (!brgemm) return;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t d = 0; d < dim; ++d) {
        w.q_t[size_t(d * rows + r)] = w.q[size_t(r * dim + d)];
        w.a_t[size_t(d * rows + r)] = w.a[size_t(r * dim + d)];
      }
    }
  }
  // c = (scale·Q)·Kᵀ (rows × Tk).
  void Scores(Scratch& w, int64_t rows, const KvTileAt& t, int64_t dim, float* c) const {
    RowsTimesTileT(w.q.data(), rows, t, dim, k, k_t, c);
  }
  // c = dO·Vᵀ (rows × Tk).
  void ScoreGrads(Scratch& w, int64_t rows, const KvTileAt& t, int64_t dim, float* c) const {
    RowsTimesTileT(w.a.data(), rows, t, dim, v, v_t, c);
  }
  // c += P·X (rows × dim): P rows × tk, X tk × dim.
  void AddPX(int64_t rows, int64_t tk, int64_t dim, const float* p, const float* x,
             float* c) const {
    if (brgemm) {
      GemmBrgemm(rows, dim, tk, p, tk, x, dim, true, c, dim);
    } else {
      Gemm(false, false, rows, dim, tk, p, tk, x, dim, 1.0f, c, dim);
    }
  }
  // grad's tile += Pᵀ·Y, Y the gathered Q rows (`q_rows`, scale·Q) or dO rows, rows × dim.
  void AddPtY(Scratch& w, int64_t rows, const KvTileAt& t, int64_t dim, const float* p, bool q_rows,
              float* grad) const {
    if (brgemm) {  // its transpose: dXᵀ (dim × Tk) += Yᵀ·P
      GemmBrgemm(dim, t.size, rows, q_rows ? w.q_t.data() : w.a_t.data(), rows, p, t.size, true,
                 grad + t.cols, lk);
    } else {
      Gemm(true, false, t.size, dim, rows, p, t.size, q_rows ? w.q.data() : w.a.data(), dim, 1.0f,
           grad + t.rows, dim);
    }
  }

 private:
  // c = A·Xᵀ for X = K or V's tile `t`.
  void RowsTimesTileT(const float* a, int64_t rows, const KvTileAt& t, int64_t dim, const float* x,
                      const float* x_t, float* c) const {
    if (brgemm) {
      GemmBrgemm(rows, t.size, dim, a, dim, x_t + t.cols, lk, false, c, t.size);
    } else {
      Gemm(false, true, rows, t.size, dim, a, dim, x + t.rows, dim, 0.0f, c, t.size);
    }
  }
};

template <>
struct Gemms<uint16_t> {
  static constexpr bool kBf16 = true;
  Gemms(float scale, F32Gemm, const at::Tensor& k, const at::Tensor& v, bool)
      : scale(scale), k(DataOf<uint16_t>(k)), v(DataOf<uint16_t>(v)) {}
  float scale;
  const uint16_t *k, *v;

  ScratchKind Kind(bool) const { return {true, false}; }
  bool Transposed() const { return false; }
  uint16_t* QRows(Scratch& w) const { return w.q16.data(); }
  uint16_t* DoRows(Scratch& w) const { return w.a16.data(); }
  float QMul() const { return 1.0f; }
  uint16_t* Row16(Scratch& w, int64_t offset) const { return w.p16.data() + offset; }
  const uint16_t* Tile(Scratch& w, const float*) const { return w.p16.data(); }
  void TransposeRows(Scratch&, int64_t, int64_t) const {}
  void Scores(Scratch& w, int64_t rows, const KvTileAt& t, int64_t dim, float* c) const {
    GemmBf16(false, true, rows, t.size, dim, scale, w.q16.data(), dim, k + t.rows, dim, 0.0f, c,
             t.size);
  }
  void ScoreGrads(Scratch& w, int64_t rows, const KvTileAt& t, int64_t dim, float* c) const {
    GemmBf16(false, true, rows, t.size, dim, 1.0f, w.a16.data(), dim, v + t.rows, dim, 0.0f, c,
             t.size);
  }
  void AddPX(int64_t rows, int64_t tk, int64_t dim, const uint16_t* p, const uint16_t* x,
             float* c) const {
    GemmBf16(false, false, rows, dim, tk, 1.0f, p, tk, x, dim, 1.0f, c, dim);
  }
  void AddPtY(Scratch& w, int64_t rows, const KvTileAt& t, int64_t dim, const uint16_t* p,
              bool q_rows, float* grad) const {
    GemmBf16(true, false, t.size, dim, rows, q_rows ? scale : 1.0f, p, t.size,
             q_rows ? w.q16.data() : w.a16.data(), dim, 1.0f, grad + t.rows, dim);
  }
};

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
// `count` of them, the first `visible` seen); the columns before `first` are zeroed after it (in
// `row16` too, the row's bfloat16 twin, when there is one), so the row's probabilities there are 0.
template <class Step>
void VisibleRow(float* row, uint16_t* row16, const std::vector<int64_t>& k_positions,
                const Tile& kt, fused_cpu_internal::Cover cover, int64_t lo, int64_t pq,
                const Step& step) {
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
  if (row16 != nullptr) std::fill(row16, row16 + first, uint16_t{0});
}

at::Tensor AsBf16(const at::Tensor& x) { return x.to(at::kBFloat16); }

}  // namespace

FusedCpuTiling FusedCpuTilingFor(int64_t dim, int64_t group, FusedCpuTiling requested, bool bf16) {
  // Key tiles of 256 (128 at head dim > 64) and about 128 stacked query rows: the score tile
  // (128 × Tk floats), its probability twin in backward, and one K and V tile stay within half
  // of a 512 KiB L2. bfloat16 GEMMs take about 256 rows: each MKL call packs its operands, and
  // on an AMX Xeon 256 rows ran the bf16 step 4-5 % faster than 128 (128 → 256 at L 8192, two
  // runs each: 1.83 / 1.74 s → 1.75 / 1.68 s).
  FusedCpuTiling t = requested;
  const int64_t rows = bf16 ? 256 : 128;
  if (t.kv_tile <= 0) t.kv_tile = dim > 64 ? 128 : 256;
  if (t.q_tile <= 0) t.q_tile = std::max<int64_t>(16, rows / std::max<int64_t>(1, group));
  return t;
}

namespace {

template <typename T>
BlockOutput ForwardOf(const Shape& s, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const BlockPositions& q_pos, const BlockPositions& k_pos, double scale,
                      FusedCpuTiling tiling, F32Gemm f32_gemm) {
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const at::TensorOptions f32 = q.options().dtype(at::kFloat);
  at::Tensor out = at::zeros({s.batch, s.heads, s.lq, s.dim}, f32);
  at::Tensor lse = at::full({s.batch, s.heads, s.lq}, kNegInf, f32);
  if (s.lq == 0 || s.lk == 0) return {out, lse, 0};
  const Plan plan = PlanOf(s, q_pos, k_pos, tiling);
  const int64_t items = s.batch * s.kv_heads * plan.q_tile_count();
  const int64_t parts = PartsFor(items);
  const std::vector<int64_t> bounds = SplitByCost(plan, items, parts);
  std::vector<int64_t> scores(size_t(parts), 0);
  const T* qp = DataOf<T>(qc);
  const T* vp = DataOf<T>(vc);
  float* outp = out.data_ptr<float>();
  float* lsep = lse.data_ptr<float>();
  const Gemms<T> gemms(float(scale), f32_gemm, kc, vc, /*backward=*/false);

  ForEachItem(plan, s, bounds, parts, tiling, gemms.Kind(/*backward=*/false),
              [&](int64_t part, const Item& item, Scratch& w) {
                const int64_t b = item.b, hk = item.kv_head;
                const Tile& qt = plan.q_tiles[size_t(item.q_tile)];
                const auto& pairs = plan.PairsOf(b, item.q_tile);
                if (pairs.empty()) return;  // out 0, lse −inf already
                const int64_t tq = qt.size(), rows = s.group * tq;
                GatherRows(qp, s, b, hk, qt, s.dim, gemms.QMul(), gemms.QRows(w));
                std::fill(w.a.begin(), w.a.begin() + rows * s.dim, 0.0f);
                std::fill(w.row_max.begin(), w.row_max.begin() + rows, kNegInf);
                std::fill(w.row_sum.begin(), w.row_sum.begin() + rows, 0.0f);
                for (const Plan::Pair& pair : pairs) {
                  const Tile& kt = plan.k_tiles[size_t(pair.k_tile)];
                  const int64_t tk = kt.size();
                  const KvTileAt kv = TileAt(s, b, hk, kt);
                  gemms.Scores(w, rows, kv, s.dim, w.s.data());  // S = scale·Q Kᵀ
                  for (int64_t i = 0; i < tq; ++i) {
                    const int64_t pq = q_pos.positions[size_t(qt.begin + i)];
                    const int64_t lo = VisibleFrom(q_pos.mask(), b, pq);
                    for (int64_t g = 0; g < s.group; ++g) {
                      const int64_t r = g * tq + i;
                      float* row = w.s.data() + r * tk;
                      uint16_t* row16 = gemms.Row16(w, r * tk);
                      VisibleRow(row, row16, k_pos.positions, kt, pair.cover, lo, pq,
                                 [&](int64_t first, int64_t n, int64_t visible) {
                                   SoftmaxRowStep(row + first, n, visible, &w.row_max[size_t(r)],
                                                  &w.row_sum[size_t(r)], w.a.data() + r * s.dim,
                                                  s.dim,
                                                  row16 == nullptr ? nullptr : row16 + first);
                                 });
                    }
                  }
                  gemms.AddPX(rows, tk, s.dim, gemms.Tile(w, w.s.data()), vp + kv.rows,
                              w.a.data());  // O += P V
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

template <typename T>
BlockGrads BackwardOf(const Shape& s, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const at::Tensor& dout, const at::Tensor& delta, const at::Tensor& lse,
                      const BlockPositions& q_pos, const BlockPositions& k_pos, double scale,
                      FusedCpuTiling tiling, F32Gemm f32_gemm) {
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const at::Tensor doc = dout.to(q.scalar_type()).contiguous();
  const at::Tensor lsec = lse.to(at::kFloat).contiguous();
  const at::Tensor deltac = delta.to(at::kFloat).contiguous();
  const at::TensorOptions f32 = q.options().dtype(at::kFloat);
  at::Tensor dq = at::zeros(qc.sizes(), f32);
  if (s.lq == 0 || s.lk == 0) return {dq, at::zeros(kc.sizes(), f32), at::zeros(vc.sizes(), f32)};
  const Plan plan = PlanOf(s, q_pos, k_pos, tiling);
  const int64_t items = s.batch * s.kv_heads * plan.q_tile_count();
  const int64_t parts = PartsFor(items);
  const std::vector<int64_t> bounds = SplitByCost(plan, items, parts);
  const float fscale = float(scale);
  const Gemms<T> gemms(fscale, f32_gemm, kc, vc, /*backward=*/true);
  // Each part accumulates dK/dV in a buffer of its own (dKᵀ/dVᵀ where the GEMMs take transposes).
  const std::vector<int64_t> grad_shape =
      gemms.Transposed() ? std::vector<int64_t>{s.batch, s.kv_heads, s.dim, s.lk}
                         : std::vector<int64_t>{s.batch, s.kv_heads, s.lk, s.dim};
  std::vector<at::Tensor> dk_parts, dv_parts;
  for (int64_t part = 0; part < parts; ++part) {
    dk_parts.push_back(at::zeros(grad_shape, f32));
    dv_parts.push_back(at::zeros(grad_shape, f32));
  }
  const T* qp = DataOf<T>(qc);
  const T* kp = DataOf<T>(kc);
  const T* dop = DataOf<T>(doc);
  const float* lsep = lsec.data_ptr<float>();
  const float* deltap = deltac.data_ptr<float>();
  float* dqp = dq.data_ptr<float>();

  ForEachItem(
      plan, s, bounds, parts, tiling, gemms.Kind(/*backward=*/true),
      [&](int64_t part, const Item& item, Scratch& w) {
        const int64_t b = item.b, hk = item.kv_head;
        float* dkp = dk_parts[size_t(part)].data_ptr<float>();
        float* dvp = dv_parts[size_t(part)].data_ptr<float>();
        const Tile& qt = plan.q_tiles[size_t(item.q_tile)];
        const auto& pairs = plan.PairsOf(b, item.q_tile);
        if (pairs.empty()) return;
        const int64_t tq = qt.size(), rows = s.group * tq;
        GatherRows(qp, s, b, hk, qt, s.dim, gemms.QMul(), gemms.QRows(w));
        GatherRows(dop, s, b, hk, qt, s.dim, 1.0f, gemms.DoRows(w));
        GatherRows(lsep, s, b, hk, qt, 1, 1.0f, w.lse.data());
        GatherRows(deltap, s, b, hk, qt, 1, 1.0f, w.delta.data());
        gemms.TransposeRows(w, rows, s.dim);
        std::fill(w.b.begin(), w.b.begin() + rows * s.dim, 0.0f);  // dQ / scale
        for (const Plan::Pair& pair : pairs) {
          const Tile& kt = plan.k_tiles[size_t(pair.k_tile)];
          const int64_t tk = kt.size();
          const KvTileAt kv = TileAt(s, b, hk, kt);
          float* p = w.s.data();
          float* ds = w.p2.data();
          gemms.Scores(w, rows, kv, s.dim, p);
          for (int64_t i = 0; i < tq; ++i) {
            const int64_t pq = q_pos.positions[size_t(qt.begin + i)];
            const int64_t lo = VisibleFrom(q_pos.mask(), b, pq);
            for (int64_t g = 0; g < s.group; ++g) {
              const int64_t r = g * tq + i;
              float* row = p + r * tk;
              uint16_t* row16 = gemms.Row16(w, r * tk);
              VisibleRow(row, row16, k_pos.positions, kt, pair.cover, lo, pq,
                         [&](int64_t first, int64_t n, int64_t visible) {
                           ProbabilityRow(row + first, n, visible, w.lse[size_t(r)],
                                          row16 == nullptr ? nullptr : row16 + first);
                         });
            }
          }
          gemms.AddPtY(w, rows, kv, s.dim, gemms.Tile(w, p), false, dvp);  // dV += Pᵀ dO
          gemms.ScoreGrads(w, rows, kv, s.dim, ds);                        // dP = dO Vᵀ
          for (int64_t r = 0; r < rows; ++r) {  // dS (over P's bfloat16 twin, no longer needed)
            ScoreGradRow(ds + r * tk, p + r * tk, tk, w.delta[size_t(r)], gemms.Row16(w, r * tk));
          }
          gemms.AddPX(rows, tk, s.dim, gemms.Tile(w, ds), kp + kv.rows,
                      w.b.data());                                         // dQ/scale += dS K
          gemms.AddPtY(w, rows, kv, s.dim, gemms.Tile(w, ds), true, dkp);  // dK += dSᵀ (scale·Q)
        }
        for (int64_t g = 0; g < s.group; ++g) {
          const int64_t head = hk * s.group + g;
          float* dst = dqp + ((b * s.heads + head) * s.lq + qt.begin) * s.dim;
          const float* src = w.b.data() + g * tq * s.dim;
          for (int64_t i = 0; i < tq * s.dim; ++i) dst[i] = src[i] * fscale;
        }
      });
  at::Tensor dk = dk_parts[0], dv = dv_parts[0];
  for (int64_t part = 1; part < parts; ++part) {  // in part order: the same sum every run
    dk.add_(dk_parts[size_t(part)]);
    dv.add_(dv_parts[size_t(part)]);
  }
  if (gemms.Transposed()) {
    dk = dk.transpose(2, 3).contiguous();
    dv = dv.transpose(2, 3).contiguous();
  }
  return {dq, dk, dv};
}

}  // namespace

BlockOutput FusedCpuAttentionForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const BlockPositions& q_pos, const BlockPositions& k_pos,
                                     double scale, FusedCpuTiling tiling, F32Gemm f32_gemm) {
  const Shape s = ShapeOf(q, k, v);
  TORCH_CHECK(int64_t(q_pos.positions.size()) == s.lq && int64_t(k_pos.positions.size()) == s.lk,
              "attention positions do not match the sequence lengths");
  tiling = FusedCpuTilingFor(s.dim, s.group, tiling, q.scalar_type() == at::kBFloat16);
  if (q.scalar_type() == at::kBFloat16) {
    return ForwardOf<uint16_t>(s, q, k, v, q_pos, k_pos, scale, tiling, f32_gemm);
  }
  return ForwardOf<float>(s, q, k, v, q_pos, k_pos, scale, tiling, f32_gemm);
}

BlockGrads FusedCpuAttentionBackward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& dout, const at::Tensor& delta,
                                     const at::Tensor& lse, const BlockPositions& q_pos,
                                     const BlockPositions& k_pos, double scale,
                                     FusedCpuTiling tiling, F32Gemm f32_gemm) {
  const Shape s = ShapeOf(q, k, v);
  tiling = FusedCpuTilingFor(s.dim, s.group, tiling, q.scalar_type() == at::kBFloat16);
  if (q.scalar_type() == at::kBFloat16) {
    return BackwardOf<uint16_t>(s, q, k, v, dout, delta, lse, q_pos, k_pos, scale, tiling,
                                f32_gemm);
  }
  return BackwardOf<float>(s, q, k, v, dout, delta, lse, q_pos, k_pos, scale, tiling, f32_gemm);
}

BlockOutput FusedCpuBlockKernel::Forward(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const BlockPositions& q_pos,
                                         const BlockPositions& k_pos, double scale) {
  if (q.scalar_type() == at::kDouble) return float64_.Forward(q, k, v, q_pos, k_pos, scale);
  TORCH_CHECK(q.device().is_cpu(),
              "training.attention_kernel = \"cpu_flash\" runs on the CPU, "
              "not on ",
              q.device(), "; HINT: \"torch_flash\" or \"auto\" on CUDA");
  if (Native(q)) {
    return FusedCpuAttentionForward(AsBf16(q), AsBf16(k), AsBf16(v), q_pos, k_pos, scale, tiling_,
                                    f32_gemm_);
  }
  return FusedCpuAttentionForward(Widen(q), Widen(k), Widen(v), q_pos, k_pos, scale, tiling_,
                                  f32_gemm_);
}

BlockGrads FusedCpuBlockKernel::Backward(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& dout,
                                         const FinalStats& final, const BlockPositions& q_pos,
                                         const BlockPositions& k_pos, double scale) {
  if (q.scalar_type() == at::kDouble) {
    return float64_.Backward(q, k, v, dout, final, q_pos, k_pos, scale);
  }
  if (Native(q)) {
    return FusedCpuAttentionBackward(AsBf16(q), AsBf16(k), AsBf16(v), AsBf16(dout), final.delta(),
                                     final.lse, q_pos, k_pos, scale, tiling_, f32_gemm_);
  }
  return FusedCpuAttentionBackward(Widen(q), Widen(k), Widen(v), Widen(dout), final.delta(),
                                   final.lse, q_pos, k_pos, scale, tiling_, f32_gemm_);
}

bool FusedCpuBlockKernel::Native(const at::Tensor& q) const {
  return q.scalar_type() == at::kBFloat16 && bf16_gemm_ == Bf16Gemm::kNative;
}

std::string FusedCpuBlockKernel::Describe() const {
  const auto size = [](int64_t n) { return n > 0 ? absl::StrCat(n) : std::string("auto"); };
  return absl::StrCat("cpu_flash: fused CPU (", AttentionRowsIsa(), "; float32 GEMMs ",
                      F32GemmName(f32_gemm_), ", bf16 GEMMs ", Bf16GemmName(bf16_gemm_),
                      ", bf16 units ", Bf16UnitsName(DetectedBf16Units()), "; tiles ",
                      size(tiling_.q_tile), "×", size(tiling_.kv_tile), ")");
}

}  // namespace ringtrain
