// The model's head and loss in one: Σ over rows of cross-entropy(h · Wᵀ, label), computed a chunk
// of rows at a time so that the (N, V) logits and their gradient never exist — for Llama 3 8B at
// long sequences they are the largest transient of the step (`ringctl plan`). When a backward will
// follow (grad mode on, h or W requiring grad), each chunk's softmax − one-hot is turned into its
// share of dh and dW while its logits exist, in the forward: the backward only scales them by the
// loss's gradient, so no logits are recomputed (three GEMMs a chunk, as the unchunked head's).
// Logits and softmax are float32 (as the unchunked head's .to(float32) and F.cross_entropy); the
// projections run in h's dtype, dW accumulates in float32. The same inputs give bitwise the same
// loss and gradients; against the unchunked head the result differs only by the order the GEMMs
// add (dW sums chunks).
//
// N rows (B·L), C model dim, V vocabulary.
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_CHUNKED_LOSS_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_CHUNKED_LOSS_H_

#include <cstdint>

#include <ATen/Tensor.h>

#include "common/plan/loss_chunks.h"

namespace ringtrain {

// Labels equal to this are left out of the sum (and get no gradient), as F.cross_entropy's
// default ignore_index.
inline constexpr int64_t kIgnoreLabel = -100;

// h (N, C) float32 or bfloat16, weight (V, C) any float dtype (cast to h's for the GEMMs; its
// gradient comes back in its own dtype), labels (N,) int64 → the summed loss, a float64 scalar
// (each row's float32 loss added in float64, so the sum hardly depends on how rows are split).
// chunk_rows 0: LossChunkRows(V, on CUDA) (common/plan/loss_chunks.h).
at::Tensor ChunkedCrossEntropySum(const at::Tensor& h, const at::Tensor& weight,
                                  const at::Tensor& labels, int64_t chunk_rows = 0);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_CHUNKED_LOSS_H_
