// The model's initial weights as a pure function of (seed, parameter name, element index), so that
// a rank can materialise exactly its own shards and every shard degree, cp and replicated run of a
// seed starts from bitwise the same weights (no generator state to share or replay).
//
// torchtitan's scheme: tok_embeddings ~ N(0, 1); wq, wk, wv, w1 ~ N(0, 0.02²) truncated to [-2, 2];
// wo, w2, w3 ~ N(0, s²) truncated to [-2, 2] with s = 0.02 / sqrt(2 (layer_id + 1)); the output
// projection ~ N(0, 1/dim) truncated to ±3 standard deviations; RMSNorm weights 1. Each element is
// drawn by Box–Muller from two uniforms that SplitMix64 makes of (seed, name, index, attempt),
// redrawn (attempt + 1) while outside its bounds, computed in double with the C library's scalar
// log / cos and rounded to float32: the same bits for the same element on any rank.
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_INITIAL_VALUES_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_INITIAL_VALUES_H_

#include <cstdint>
#include <string>

#include <ATen/Tensor.h>

#include "worker/engine/model/model_args.h"

namespace ringtrain {

// Elements [begin, end) of parameter `name` (torchtitan's names) flattened, into `out` (float32,
// contiguous, on the CPU, end - begin elements).
void FillInitialValues(const std::string& name, const ModelArgs& args, uint64_t seed, int64_t begin,
                       int64_t end, const at::Tensor& out);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_INITIAL_VALUES_H_
