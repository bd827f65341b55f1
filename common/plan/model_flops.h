// The arithmetic behind MFU, model FLOPs utilization (README "Metrics"): the FLOPs a trained token
// costs, from the config as torchtitan's get_dense_model_nparams_and_flops has them from the model,
// and the dense peak of the GPUs whose figures are published. The trainer measures the rest
// (worker/trainer/mfu.h). Dimension letters: P parameters (PlannedParameterCount, the model's own
// count), P_emb = V · C the token embedding's, L layers, H query heads, Dh head_dim, T seq_len.
#ifndef RINGTRAIN_COMMON_PLAN_MODEL_FLOPS_H_
#define RINGTRAIN_COMMON_PLAN_MODEL_FLOPS_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "common/config/choices.h"
#include "common/config/job_config.h"

namespace ringtrain {

// FLOPs of one token of a training step, forward and backward: 6 · (P − P_emb) + 12 · L · H · Dh ·
// T.
//   6 per parameter the token meets in a matmul: 2 (a multiply and an add) forward, 4 backward
//   (the input's gradient and the weight's). The embedding is a lookup, not a matmul, and is left
//   out, except when tied: then the one weight is also the output projection and stays in.
//   12 · L · H · Dh · T: per layer and query head, QKᵀ and the weighted sum of V are 2 · Dh · T
//   each forward and twice that backward, T keys per query — the convention does not halve it for
//   the causal mask, nor count flash attention's or activation checkpointing's recomputation.
// Context parallelism does not change it: a token's attention is counted at the whole sequence's
// T on whichever rank holds it, and the exchange of K/V is overhead, not model FLOPs.
double FlopsPerToken(const ModelSection& model, int64_t seq_len);

// One device's dense peak FLOP/s when computing in `compute` (bf16: tensor cores; float32: the
// plain FP32 rate, as PyTorch's matmul runs without TF32 by default), from the vendors' data
// sheets, for a device named as CUDA names it ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB").
// nullopt for a device the table does not know, or a figure it does not hold.
std::optional<double> KnownPeakFlops(absl::string_view device_name, MixedPrecision compute);

// MFU in percent: the achieved model FLOP/s of the world (flops_per_token × tokens_per_second, the
// step record's global rate) over its peak (world ranks of peak_per_rank each).
double MfuPercent(double flops_per_token, double tokens_per_second, int64_t world,
                  double peak_per_rank);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_PLAN_MODEL_FLOPS_H_
