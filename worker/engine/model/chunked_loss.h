// The model's head and loss in one: Σ over rows of cross-entropy(h · Wᵀ, label), computed a chunk
// of rows at a time so that the (N, V) logits and their gradient never exist — for Llama 3 8B at
// long sequences they are the largest transient of the step (`ringctl plan`). The forward keeps
// each row's log-sum-exp; the backward recomputes a chunk's logits from h and W, turns them into
// softmax − one-hot and accumulates dh and dW chunk by chunk. Logits and softmax are float32 (as
// the unchunked head's .to(float32) and F.cross_entropy); the projections run in h's dtype. The
// same inputs give bitwise the same loss and gradients; against the unchunked head the result
// differs only by the order the GEMMs add (dW sums chunks).
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
// chunk_rows 0: LossChunkRows(V) (common/plan/loss_chunks.h).
at::Tensor ChunkedCrossEntropySum(const at::Tensor& h, const at::Tensor& weight,
                                  const at::Tensor& labels, int64_t chunk_rows = 0);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_CHUNKED_LOSS_H_
