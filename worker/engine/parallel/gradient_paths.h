// The two gradient paths (gradient_path.h), for Parallelize. Internal to parallel/.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_GRADIENT_PATHS_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_GRADIENT_PATHS_H_

#include <memory>
#include <optional>

#include "worker/engine/model/llama.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/parallel/comm.h"
#include "worker/engine/parallel/fsdp.h"
#include "worker/engine/parallel/gradient_path.h"

namespace ringtrain {

// The model's own parameters; gradients all-reduced over the world in `reduce_dtype` (no
// communication when `comm` is null, world 1). `model` and `comm` must outlive the path.
std::unique_ptr<GradientPath> MakeReplicatedGradients(TransformerImpl& model, Communicator* comm,
                                                      c10::ScalarType reduce_dtype,
                                                      const AdamWOptions& adam);
// Shards `model` over comm's FSDP group and makes the model take its weights from the shards: its
// weights as they are now, or — a model not materialized (meta parameters) — each rank's own
// elements of the initial weights of `seed` (initial_values.h), zeros without a seed (weights
// about to be loaded). `comm` must outlive the path.
std::unique_ptr<GradientPath> MakeShardedGradients(TransformerImpl& model, Communicator& comm,
                                                   const FsdpOptions& options,
                                                   const AdamWOptions& adam,
                                                   std::optional<uint64_t> seed);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_GRADIENT_PATHS_H_
