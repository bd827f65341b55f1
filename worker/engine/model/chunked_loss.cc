#include "worker/engine/model/chunked_loss.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>

namespace ringtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::tensor_list;

// One chunk's float32 logits (n, V) and its labels with ignored rows made 0 (a valid index).
struct Chunk {
  at::Tensor logits, labels, valid;
};

Chunk ChunkLogits(const at::Tensor& h, const at::Tensor& w, const at::Tensor& labels, int64_t begin,
                  int64_t end) {
  const at::Tensor lab = labels.slice(0, begin, end);
  const at::Tensor valid = lab != kIgnoreLabel;
  return {at::linear(h.slice(0, begin, end), w).to(at::kFloat), at::where(valid, lab, 0), valid};
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
    at::Tensor total = at::zeros({}, h.options().dtype(at::kDouble));
    at::Tensor dh, dw;
    if (with_grads) {
      dh = at::empty_like(h);
      dw = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    }
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t end = std::min(rows, begin + chunk_rows);
      Chunk c = ChunkLogits(h, w, labels, begin, end);
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
      dh.slice(0, begin, end).copy_(at::mm(d_h, w));
      if (h.is_cuda() && h.scalar_type() != at::kFloat) {
        // 16-bit on CUDA: the tensor cores' matmul of the 16-bit gradient (what the projection's
        // own backward would multiply) accumulated in float32 straight into dW; a float32 matmul
        // there runs without them, several times slower.
        at::addmm_out(dw, dw, d_h.t(), h.slice(0, begin, end), at::kFloat);
      } else {
        dw.addmm_(d.t(), h.slice(0, begin, end).to(at::kFloat));
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
