// Rotary position embedding, interleaved-pair (complex) convention as torchtitan's llama3: the head
// dim is read as D/2 pairs (x[2i], x[2i+1]) = x[2i] + i·x[2i+1], each rotated by angle p·θ_i with
// θ_i = theta^(−2i/D). Tables cover positions [0, max_seq_len) and are indexed by the tokens' own
// positions, so a CP shard passes its (non-contiguous) positions and the tables are never sharded.
// With llama3 scaling (Llama 3.1/3.2) the θ_i are rescaled as transformers'
// _compute_llama3_parameters does, op for op in float32, so the tables agree with transformers'.
#ifndef RINGTRAIN_WORKER_ENGINE_MODEL_ROPE_H_
#define RINGTRAIN_WORKER_ENGINE_MODEL_ROPE_H_

#include <cstdint>

#include <ATen/Tensor.h>

#include "worker/engine/model/model_args.h"

namespace ringtrain {

class RotaryTables {
 public:
  RotaryTables() = default;
  RotaryTables(int64_t head_dim, int64_t max_seq_len, double theta,
               const RopeScaling& scaling = {});

  // θ_i for i in [0, D/2): (D/2,) float32, scaled as `scaling` says.
  static at::Tensor InverseFrequencies(int64_t head_dim, double theta, const RopeScaling& scaling);

  // x (B, L, heads, D) rotated at `positions` (L,) int64 → (B, L, heads, D), x's dtype.
  at::Tensor Apply(const at::Tensor& x, const at::Tensor& positions) const;

  // The same tables on `device` (they live where the model's activations do).
  RotaryTables To(const c10::Device& device) const;

  const at::Tensor& cos() const { return cos_; }  // (max_seq_len, D/2) float32
  const at::Tensor& sin() const { return sin_; }

 private:
  at::Tensor cos_;
  at::Tensor sin_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_MODEL_ROPE_H_
