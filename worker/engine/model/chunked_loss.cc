#include "worker/engine/model/chunked_loss.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>

#include "worker/engine/kernels/brgemm_matmul.h"
#include "worker/engine/model/brgemm_linear.h"

namespace ringtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::tensor_list;

// One chunk's float32 logits (n, V) and its labels with ignored rows made 0 (a valid index).
struct Chunk {
  at::Tensor logits, labels, valid;
};

// The chunk's three GEMMs: logits = h·Wᵀ, dh = d·W and dW += dᵀ·h for the chunk's rows h and
// logit gradients d — on the BRGeMM GEMM where it is the float32 engine (brgemm_linear.h), which
// takes no transposed operand (Wᵀ is made once a call; dᵀ piece by piece inside the weight
// gradient's GEMM), else ATen's.
class HeadGemms {
 public:
  HeadGemms(const at::Tensor& h, const at::Tensor& w)
      : brgemm_(BrgemmLinearApplies(h, w)), w_(brgemm_ ? w.contiguous() : w) {
    if (brgemm_) w_t_ = w.t().contiguous();  // (C, V)
  }

  at::Tensor Logits(const at::Tensor& h) const {
    if (!brgemm_) return at::linear(h, w_);
    const int64_t rows = h.size(0), dim = h.size(1), vocab = w_.size(0);
    at::Tensor logits = at::empty({rows, vocab}, h.options());
    BrgemmMatmul(rows, vocab, dim, h.data_ptr<float>(), dim, w_t_.data_ptr<float>(), vocab,
                 logits.data_ptr<float>(), vocab);
    return logits;
  }

  // dh's rows (n, C) = d (n, V) · W.
  void InputGrad(const at::Tensor& d, at::Tensor dh) const {
    if (!brgemm_) {
      dh.copy_(at::mm(d, w_));
      return;
    }
    const int64_t dim = w_.size(1), vocab = w_.size(0);
    BrgemmMatmul(d.size(0), dim, vocab, d.data_ptr<float>(), vocab, w_.data_ptr<float>(), dim,
                 dh.data_ptr<float>(), dim);
  }

  // dw (V, C) += dᵀ · h (the chunk's float32 rows).
  void AddWeightGrad(const at::Tensor& d, const at::Tensor& h, at::Tensor& dw) const {
    if (!brgemm_) {
      dw.addmm_(d.t(), h);
      return;
    }
    const at::Tensor dc = d.contiguous();
    const int64_t rows = h.size(0), dim = h.size(1), vocab = d.size(1);
    BrgemmMatmulTransposedA(vocab, dim, rows, dc.data_ptr<float>(), vocab, h.data_ptr<float>(), dim,
                            dw.data_ptr<float>(), dim, /*accumulate=*/true);
  }

 private:
  bool brgemm_;
  at::Tensor w_, w_t_;
};

Chunk ChunkLogits(const HeadGemms& gemms, const at::Tensor& h, const at::Tensor& labels,
                  int64_t begin, int64_t end) {
  const at::Tensor lab = labels.slice(0, begin, end);
  const at::Tensor valid = lab != kIgnoreLabel;
  return {gemms.Logits(h.slice(0, begin, end)).to(at::kFloat), at::where(valid, lab, 0), valid};
}

// softmax − one-hot of a chunk's logits, in place (ignored rows 0): the gradient of the chunk's
// summed loss with respect to its logits.
void LogitGradient(Chunk& c, const at::Tensor& chunk_lse) {
  at::Tensor& d = c.logits;
  d.sub_(chunk_lse.unsqueeze(1)).exp_();
  d.scatter_add_(1, c.labels.unsqueeze(1), at::full({d.size(0), 1}, -1.0f, d.options()));
  d.mul_(c.valid.to(at::kFloat).unsqueeze(1));
}

class ChunkedCrossEntropyFunction : public Function<ChunkedCrossEntropyFunction> {
 public:
  // With `with_grads` the gradients of the summed loss are made here, chunk by chunk, while each
  // chunk's logits exist: dh (N, C) in h's dtype and dW (V, C) in float32, kept for the backward,
  // which only scales them — no logits are ever recomputed.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& weight,
                            const at::Tensor& labels, int64_t chunk_rows, bool with_grads) {
    const int64_t rows = h.size(0);
    const at::Tensor w = weight.to(h.scalar_type());
    const HeadGemms gemms(h, w);
    at::Tensor total = at::zeros({}, h.options().dtype(at::kDouble));
    at::Tensor dh, dw;
    if (with_grads) {
      dh = at::empty_like(h);
      dw = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    }
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t end = std::min(rows, begin + chunk_rows);
      Chunk c = ChunkLogits(gemms, h, labels, begin, end);
      const at::Tensor chunk_lse = at::logsumexp(c.logits, 1);
      const at::Tensor picked = c.logits.gather(1, c.labels.unsqueeze(1)).squeeze(1);
      // Each row's float32 loss, added in float64: the sum does not depend on how the rows are
      // chunked or split over ranks beyond the last bits of a double.
      total += ((chunk_lse - picked) * c.valid).to(at::kDouble).sum();
      if (!with_grads) continue;
      LogitGradient(c, chunk_lse);
      // dh in h's dtype (the gradient rounded as the projection's backward would see it); dW
      // accumulated in float32 (from the float32 gradient, or on CUDA the 16-bit one), so no
      // (V, C) temporary is made.
      const at::Tensor& d = c.logits;
      const at::Tensor d_h = d.to(h.scalar_type());
      gemms.InputGrad(d_h, dh.slice(0, begin, end));
      if (h.is_cuda() && h.scalar_type() != at::kFloat) {
        // 16-bit on CUDA: the tensor cores' matmul of the 16-bit gradient (what the projection's
        // own backward would multiply) accumulated in float32 straight into dW; a float32 matmul
        // there runs without them, several times slower.
        at::addmm_out(dw, dw, d_h.t(), h.slice(0, begin, end), at::kFloat);
      } else {
        gemms.AddWeightGrad(d, h.slice(0, begin, end).to(at::kFloat), dw);
      }
    }
    // Kept as plain values, not saved variables: the backward scales them in place.
    ctx->saved_data["dh"] = dh;
    ctx->saved_data["dw"] = dw;
    ctx->saved_data["weight_dtype"] = weight.scalar_type();
    return total;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    at::Tensor dh = ctx->saved_data["dh"].toTensor();
    at::Tensor dw = ctx->saved_data["dw"].toTensor();
    TORCH_CHECK(dh.defined(), "chunked loss: backward of a forward run without gradients");
    const c10::ScalarType weight_dtype = ctx->saved_data["weight_dtype"].toScalarType();
    ctx->saved_data.clear();  // the buffers go with the returned gradients
    // d total / d loss, a scalar: in place, no host sync.
    dh.mul_(grads[0]);
    dw.mul_(grads[0]);
    return {dh, dw.to(weight_dtype), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ChunkedCrossEntropySum(const at::Tensor& h, const at::Tensor& weight,
                                  const at::Tensor& labels, int64_t chunk_rows) {
  TORCH_CHECK(h.dim() == 2 && weight.dim() == 2 && h.size(1) == weight.size(1),
              "chunked loss: h (N, C) and weight (V, C), got ", h.sizes(), " and ", weight.sizes());
  TORCH_CHECK(labels.numel() == h.size(0), "chunked loss: ", labels.numel(), " labels for ",
              h.size(0), " rows");
  if (chunk_rows <= 0) chunk_rows = LossChunkRows(weight.size(0), h.is_cuda());
  const bool with_grads =
      at::GradMode::is_enabled() && (h.requires_grad() || weight.requires_grad());
  return ChunkedCrossEntropyFunction::apply(
      h.contiguous(), weight, labels.reshape({-1}).to(at::kLong), chunk_rows, with_grads);
}

}  // namespace ringtrain
