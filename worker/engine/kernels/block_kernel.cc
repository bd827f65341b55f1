#include "worker/engine/kernels/block_kernel.h"

#include <ATen/SDPBackend.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <limits>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/kernels/block_plan.h"
#include "worker/engine/kernels/fused_cpu_attention.h"

namespace ringtrain {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// at::_fused_sdp_choice returns an at::SDPBackend as an integer.
constexpr int64_t kSdpFlash = int64_t(at::SDPBackend::flash_attention);
constexpr int64_t kSdpEfficient = int64_t(at::SDPBackend::efficient_attention);
constexpr int64_t kSdpCudnn = int64_t(at::SDPBackend::cudnn_attention);

// K/V heads repeated for the query heads, torchtitan's repeat_kv order (kv head j serves query
// heads j·G … j·G + G − 1), so every fused kernel sees plain multi-head attention.
at::Tensor ExpandHeads(const at::Tensor& x, int64_t group) {
  return group == 1 ? x : x.repeat_interleave(group, 1);
}

// Inverse of ExpandHeads for gradients: (B, H, L, D) → (B, Hk, L, D), summing each group.
at::Tensor SumHeads(const at::Tensor& x, int64_t group) {
  if (group == 1) return x;
  return x.view({x.size(0), x.size(1) / group, group, x.size(2), x.size(3)}).sum(2);
}

int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

at::Tensor Rows(const at::Tensor& x, const IndexRange& r) {
  return x.narrow(2, r.begin, r.size()).contiguous();
}

// (B, H, n) from whatever shape the kernel returns (efficient pads the rows to a multiple
// of 32; cuDNN may add a trailing 1).
at::Tensor NormalizeLse(const at::Tensor& lse, int64_t rows) {
  return lse.reshape({lse.size(0), lse.size(1), -1}).narrow(2, 0, rows);
}

// Placeholders for the dropout RNG state the backward kernels take; with dropout 0 they are not
// read. cuDNN's backward requires them on the device of its inputs.
at::Tensor NoRngState(const c10::Device& device = c10::kCPU) {
  return at::zeros({}, at::TensorOptions(device).dtype(at::kLong));
}

// `x` (B, H, n, D) laid out in memory as (B, n, H, D). The memory-efficient backward reads the
// output's rows with that stride whatever strides it is given (its forward returns its output so;
// a (B, H, n, D)-contiguous output gave dq and dk off by units on an H200, tests/gpu/RESULTS.md).
// cuDNN gets the same layout for out and dout on every call: PyTorch 2.11 reuses its cuDNN graphs
// across calls whose out/dout strides differ, which gave wrong gradients there.
at::Tensor RowMajorHeads(const at::Tensor& x) {
  return x.transpose(1, 2).contiguous().transpose(1, 2);
}

}  // namespace

const char* FusedBackendName(FusedBackend backend) {
  switch (backend) {
    case FusedBackend::kAuto: return "auto";
    case FusedBackend::kFlash: return "flash";
    case FusedBackend::kEfficient: return "efficient";
    case FusedBackend::kCudnn: return "cudnn";
    case FusedBackend::kCpuFlash: return "cpu-flash";
  }
  return "?";
}

c10::ScalarType AccumulateType(c10::ScalarType compute) {
  return compute == at::kBFloat16 || compute == at::kHalf ? at::kFloat : compute;
}

at::Tensor Widen(const at::Tensor& x) { return x.to(AccumulateType(x.scalar_type())); }

const at::Tensor& FinalStats::delta() const {
  if (!delta_.defined()) delta_ = AttentionDelta(Widen(dout), Widen(out));
  return delta_;
}

FinalStats FinalStats::Rows(int64_t begin, int64_t end) const {
  auto rows = [&](const at::Tensor& t) { return t.narrow(2, begin, end - begin).contiguous(); };
  FinalStats part = MakeFinalStats(rows(out), rows(lse), rows(dout));
  if (delta_.defined()) part.delta_ = rows(delta_);
  return part;
}

FinalStats MakeFinalStats(const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout) {
  FinalStats final;
  final.out = out;
  final.lse = lse;
  final.dout = dout;
  return final;
}

// ---- tiled ----

BlockOutput TiledBlockKernel::Forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const BlockPositions& q_pos, const BlockPositions& k_pos,
                                      double scale) {
  // bf16 is widened exactly; scores, softmax and the weighted sum are then float32.
  return AttentionBlockForward(Widen(q), Widen(k), Widen(v), q_pos, k_pos, MaskKind::kCausal, scale,
                               tiling_);
}

BlockGrads TiledBlockKernel::Backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& dout, const FinalStats& final,
                                      const BlockPositions& q_pos, const BlockPositions& k_pos,
                                      double scale) {
  return AttentionBlockBackward(Widen(q), Widen(k), Widen(v), Widen(dout), final.delta(), final.lse,
                                q_pos, k_pos, MaskKind::kCausal, scale, tiling_);
}

std::string TiledBlockKernel::Describe() const {
  return absl::StrCat("tiled ", tiling_.q_tile, "×", tiling_.kv_tile);
}

// ---- fused ----

FusedBackend FusedBlockKernel::Resolve(const at::Tensor& q, const at::Tensor& k,
                                       bool causal) const {
  if (backend_ != FusedBackend::kAuto) return backend_;
  if (!q.is_cuda()) return FusedBackend::kCpuFlash;
  const int64_t choice = at::_fused_sdp_choice(q, k, k, {}, 0.0, causal);
  const bool reduced = q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf;
  const int64_t head_dim = q.size(-1);
  switch (choice) {
    case kSdpFlash: return FusedBackend::kFlash;
    case kSdpEfficient: return FusedBackend::kEfficient;
    case kSdpCudnn:
      // Flash ahead of cuDNN where flash takes the shapes (16-bit, head dim a multiple of 8 up
      // to 256): the kernel PyTorch's own ring attention runs most.
      return reduced && head_dim % 8 == 0 && head_dim <= 256 ? FusedBackend::kFlash
                                                             : FusedBackend::kCudnn;
    default: break;
  }
  TORCH_CHECK(false, "no fused attention kernel applies to ", q.scalar_type(), " q ", q.sizes(),
              " on ", q.device(), " (PyTorch chose SDPA backend ", choice,
              "); HINT: training.attention_kernel = \"tiled\"");
}

namespace {

struct CallResult {
  at::Tensor out;  // (B, H, n, D) in the compute dtype
  at::Tensor lse;  // (B, H, n) float32
};

CallResult CallForward(FusedBackend backend, const at::Tensor& q, const at::Tensor& k,
                       const at::Tensor& v, bool causal, double scale) {
  switch (backend) {
    case FusedBackend::kCpuFlash: {
      auto [out, lse] =
          at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, {}, scale);
      return {out, NormalizeLse(lse, q.size(2))};
    }
    case FusedBackend::kFlash: {
      auto r = at::_scaled_dot_product_flash_attention(q, k, v, 0.0, causal, false, scale);
      return {std::get<0>(r), NormalizeLse(std::get<1>(r), q.size(2))};
    }
    case FusedBackend::kEfficient: {
      auto r = at::_scaled_dot_product_efficient_attention(q, k, v, {}, true, 0.0, causal, scale);
      return {std::get<0>(r), NormalizeLse(std::get<1>(r), q.size(2))};
    }
    case FusedBackend::kCudnn: {
      // Contiguous q, k, v: one layout on every call (see RowMajorHeads).
      auto r = at::_scaled_dot_product_cudnn_attention(
          q.contiguous(), k.contiguous(), v.contiguous(), {}, true, 0.0, causal, false, scale);
      return {std::get<0>(r), NormalizeLse(std::get<1>(r), q.size(2))};
    }
    case FusedBackend::kAuto: break;
  }
  TORCH_CHECK(false, "fused attention: backend not resolved");
}

// (dq, dk, dv) in the compute dtype. `lse` (B, H, n) float32 is the final one.
std::tuple<at::Tensor, at::Tensor, at::Tensor> CallBackward(
    FusedBackend backend, const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, bool causal, double scale) {
  const int64_t lq = q.size(2), lk = k.size(2);
  switch (backend) {
    case FusedBackend::kCpuFlash:
      return at::_scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0,
                                                                      causal, {}, scale);
    case FusedBackend::kFlash:
      return at::_scaled_dot_product_flash_attention_backward(dout, q, k, v, out, lse, at::Tensor(),
                                                              at::Tensor(), lq, lk, 0.0, causal,
                                                              NoRngState(), NoRngState(), scale);
    case FusedBackend::kEfficient: {
      // The kernel's log-sum-exp rows are padded to a multiple of 32, as its forward returns them.
      at::Tensor padded = at::zeros({lse.size(0), lse.size(1), RoundUp(lq, 32)}, lse.options());
      padded.narrow(2, 0, lq).copy_(lse);
      auto r = at::_scaled_dot_product_efficient_attention_backward(
          RowMajorHeads(dout), q, k, v, at::Tensor(), RowMajorHeads(out), padded, NoRngState(),
          NoRngState(), 0.0, {true, true, true, false}, causal, scale);
      return {std::get<0>(r), std::get<1>(r), std::get<2>(r)};
    }
    case FusedBackend::kCudnn:
      return at::_scaled_dot_product_cudnn_attention_backward(
          RowMajorHeads(dout), q.contiguous(), k.contiguous(), v.contiguous(), RowMajorHeads(out),
          lse.unsqueeze(-1).contiguous(), NoRngState(q.device()), NoRngState(q.device()),
          at::Tensor(), at::Tensor(), at::Tensor(), lq, lk, 0.0, causal, scale);
    case FusedBackend::kAuto: break;
  }
  TORCH_CHECK(false, "fused attention: backend not resolved");
}

int64_t ScoresOf(const FusedCall& call, int64_t batch_heads) {
  const int64_t n = call.q.size();
  return call.causal ? batch_heads * n * (n + 1) / 2 : batch_heads * n * call.k.size();
}

}  // namespace

namespace {

at::Tensor Row(const at::Tensor& x, int64_t b) { return x.narrow(0, b, 1); }

// Batch row `b`'s positions alone: its document starts as a one-row mask.
BlockPositions RowPositions(const BlockPositions& pos, int64_t b) {
  BlockPositions row{pos.positions};
  auto mask = std::make_shared<DocumentMask>();
  mask->starts.push_back(pos.mask()->starts[size_t(b)]);
  row.documents = std::move(mask);
  return row;
}

}  // namespace

BlockOutput FusedBlockKernel::RunForward(const std::vector<FusedCall>& plan, const at::Tensor& q,
                                         const at::Tensor& k, const at::Tensor& v, double scale) {
  const int64_t batch = q.size(0), heads = q.size(1), group = heads / k.size(1);
  const auto acc = q.options().dtype(AccumulateType(q.scalar_type()));
  BlockOutput result{at::zeros({batch, heads, q.size(2), q.size(3)}, acc),
                     at::full({batch, heads, q.size(2)}, kNegInf, acc)};
  if (plan.empty()) return result;
  const at::Tensor ke = ExpandHeads(k, group), ve = ExpandHeads(v, group);
  std::vector<bool> touched(size_t(q.size(2)), false);
  for (const FusedCall& call : plan) {
    const at::Tensor qc = Rows(q, call.q), kc = Rows(ke, call.k), vc = Rows(ve, call.k);
    const CallResult r = CallForward(Resolve(qc, kc, call.causal), qc, kc, vc, call.causal, scale);
    at::Tensor out_rows = result.out.narrow(2, call.q.begin, call.q.size());
    at::Tensor lse_rows = result.lse.narrow(2, call.q.begin, call.q.size());
    const auto first = touched.begin() + call.q.begin, last = touched.begin() + call.q.end;
    if (std::none_of(first, last, [](bool t) { return t; })) {
      // The first call on these rows: its result is theirs (what a merge with nothing gives).
      out_rows.copy_(r.out);
      lse_rows.copy_(r.lse);
    } else {  // merge in the accumulate type
      at::Tensor merged_out = out_rows.clone(), merged_lse = lse_rows.clone();
      MergeBlockInto(merged_out, merged_lse, BlockOutput{Widen(r.out), r.lse.to(acc.dtype())});
      out_rows.copy_(merged_out);
      lse_rows.copy_(merged_lse);
    }
    std::fill(first, last, true);
    result.scores_computed += ScoresOf(call, batch * heads);
  }
  return result;
}

BlockGrads FusedBlockKernel::RunBackward(const std::vector<FusedCall>& plan, const at::Tensor& q,
                                         const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& dout, const FinalStats& final,
                                         double scale) {
  const int64_t group = q.size(1) / k.size(1);
  const auto acc = q.options().dtype(AccumulateType(q.scalar_type()));
  at::Tensor dq = at::zeros(q.sizes(), acc);
  at::Tensor dke = at::zeros({k.size(0), q.size(1), k.size(2), k.size(3)}, acc);
  at::Tensor dve = at::zeros_like(dke);
  if (!plan.empty()) {
    const at::Tensor ke = ExpandHeads(k, group), ve = ExpandHeads(v, group);
    const at::Tensor out = final.out.to(q.scalar_type());
    for (const FusedCall& call : plan) {
      const at::Tensor qc = Rows(q, call.q), kc = Rows(ke, call.k), vc = Rows(ve, call.k);
      auto [dqc, dkc, dvc] = CallBackward(
          Resolve(qc, kc, call.causal), Rows(dout, call.q), qc, kc, vc, Rows(out, call.q),
          Rows(final.lse, call.q).to(AccumulateType(q.scalar_type())), call.causal, scale);
      dq.narrow(2, call.q.begin, call.q.size()).add_(Widen(dqc));
      dke.narrow(2, call.k.begin, call.k.size()).add_(Widen(dkc));
      dve.narrow(2, call.k.begin, call.k.size()).add_(Widen(dvc));
    }
  }
  return {dq, SumHeads(dke, group), SumHeads(dve, group)};
}

BlockOutput FusedBlockKernel::Forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const BlockPositions& q_pos, const BlockPositions& k_pos,
                                      double scale) {
  if (q_pos.mask() != nullptr) {  // documents: each batch row its own calls
    std::vector<at::Tensor> outs, lses;
    int64_t scores = 0;
    for (int64_t b = 0; b < q.size(0); ++b) {
      const auto plan = PlanDocumentCalls(q_pos.positions, k_pos.positions, *q_pos.mask(), b);
      BlockOutput r = plan ? RunForward(*plan, Row(q, b), Row(k, b), Row(v, b), scale)
                           : fallback_.Forward(Row(q, b), Row(k, b), Row(v, b),
                                               RowPositions(q_pos, b), k_pos, scale);
      outs.push_back(r.out);
      lses.push_back(r.lse);
      scores += r.scores_computed;
    }
    return {at::cat(outs), at::cat(lses), scores};
  }
  const auto plan = PlanFusedCalls(q_pos.positions, k_pos.positions, /*causal_mask=*/true);
  if (!plan) return fallback_.Forward(q, k, v, q_pos, k_pos, scale);
  return RunForward(*plan, q, k, v, scale);
}

BlockGrads FusedBlockKernel::Backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& dout, const FinalStats& final,
                                      const BlockPositions& q_pos, const BlockPositions& k_pos,
                                      double scale) {
  if (q_pos.mask() != nullptr) {
    std::vector<at::Tensor> dq, dk, dv;
    for (int64_t b = 0; b < q.size(0); ++b) {
      const auto plan = PlanDocumentCalls(q_pos.positions, k_pos.positions, *q_pos.mask(), b);
      const FinalStats row_final =
          MakeFinalStats(Row(final.out, b), Row(final.lse, b), Row(final.dout, b));
      BlockGrads g =
          plan ? RunBackward(*plan, Row(q, b), Row(k, b), Row(v, b), Row(dout, b), row_final, scale)
               : fallback_.Backward(Row(q, b), Row(k, b), Row(v, b), Row(dout, b), row_final,
                                    RowPositions(q_pos, b), k_pos, scale);
      dq.push_back(g.dq);
      dk.push_back(g.dk);
      dv.push_back(g.dv);
    }
    return {at::cat(dq), at::cat(dk), at::cat(dv)};
  }
  const auto plan = PlanFusedCalls(q_pos.positions, k_pos.positions, /*causal_mask=*/true);
  if (!plan) return fallback_.Backward(q, k, v, dout, final, q_pos, k_pos, scale);
  return RunBackward(*plan, q, k, v, dout, final, scale);
}

std::string FusedBlockKernel::Describe() const {
  return absl::StrCat("fused (", FusedBackendName(backend_), "; tiled fallback ",
                      fallback_.Describe(), ")");
}

std::shared_ptr<BlockKernel> MakeBlockKernel(AttentionKernelKind kind, const c10::Device& device,
                                             AttentionTiling tiling) {
  switch (kind) {
    case AttentionKernelKind::kAuto:
      if (device.is_cuda()) return std::make_shared<FusedBlockKernel>(FusedBackend::kAuto, tiling);
      return std::make_shared<FusedCpuBlockKernel>();
    case AttentionKernelKind::kCpuFlash: return std::make_shared<FusedCpuBlockKernel>();
    case AttentionKernelKind::kTorchFlash:
      return std::make_shared<FusedBlockKernel>(FusedBackend::kAuto, tiling);
    case AttentionKernelKind::kTiled: return std::make_shared<TiledBlockKernel>(tiling);
  }
  return std::make_shared<TiledBlockKernel>(tiling);
}

}  // namespace ringtrain
