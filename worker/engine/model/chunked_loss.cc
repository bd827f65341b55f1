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

class ChunkedCrossEntropyFunction : public Function<ChunkedCrossEntropyFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& weight,
                            const at::Tensor& labels, int64_t chunk_rows) {
    const int64_t rows = h.size(0);
    const at::Tensor w = weight.to(h.scalar_type());
    at::Tensor lse = at::empty({rows}, h.options().dtype(at::kFloat));
    at::Tensor total = at::zeros({}, h.options().dtype(at::kDouble));
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t end = std::min(rows, begin + chunk_rows);
      const Chunk c = ChunkLogits(h, w, labels, begin, end);
      const at::Tensor chunk_lse = at::logsumexp(c.logits, 1);
      lse.slice(0, begin, end).copy_(chunk_lse);
      const at::Tensor picked = c.logits.gather(1, c.labels.unsqueeze(1)).squeeze(1);
      // Each row's float32 loss, added in float64: the sum does not depend on how the rows are
      // chunked or split over ranks beyond the last bits of a double.
      total += ((chunk_lse - picked) * c.valid).to(at::kDouble).sum();
    }
    ctx->save_for_backward({h, weight, labels, lse});
    ctx->saved_data["chunk_rows"] = chunk_rows;
    return total;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &h = saved[0], &weight = saved[1], &labels = saved[2], &lse = saved[3];
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const int64_t rows = h.size(0);
    const at::Tensor w = weight.to(h.scalar_type());
    const at::Tensor g = grads[0].to(at::kFloat);  // d loss, a scalar
    at::Tensor dh = at::empty_like(h);
    at::Tensor dw = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t end = std::min(rows, begin + chunk_rows);
      Chunk c = ChunkLogits(h, w, labels, begin, end);
      // softmax − one-hot, scaled by the loss's gradient; ignored rows 0. In place: the logits
      // buffer is the chunk's only (n, V) tensor.
      at::Tensor& d = c.logits;
      d.sub_(lse.slice(0, begin, end).unsqueeze(1)).exp_();
      d.scatter_add_(1, c.labels.unsqueeze(1), at::full({end - begin, 1}, -1.0f, d.options()));
      d.mul_((c.valid.to(at::kFloat) * g).unsqueeze(1));
      // dh in h's dtype (the gradient rounded as the projection's backward would see it); dW
      // accumulated in float32 from the float32 gradient, so no (V, C) temporary is made.
      const at::Tensor hc = h.slice(0, begin, end);
      dh.slice(0, begin, end).copy_(at::mm(d.to(h.scalar_type()), w));
      dw.addmm_(d.t(), hc.to(at::kFloat));
    }
    return {dh, dw.to(weight.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ChunkedCrossEntropySum(const at::Tensor& h, const at::Tensor& weight,
                                  const at::Tensor& labels, int64_t chunk_rows) {
  TORCH_CHECK(h.dim() == 2 && weight.dim() == 2 && h.size(1) == weight.size(1),
              "chunked loss: h (N, C) and weight (V, C), got ", h.sizes(), " and ", weight.sizes());
  TORCH_CHECK(labels.numel() == h.size(0), "chunked loss: ", labels.numel(), " labels for ",
              h.size(0), " rows");
  if (chunk_rows <= 0) chunk_rows = LossChunkRows(weight.size(0));
  return ChunkedCrossEntropyFunction::apply(h.contiguous(), weight,
                                            labels.reshape({-1}).to(at::kLong), chunk_rows);
}

}  // namespace ringtrain
