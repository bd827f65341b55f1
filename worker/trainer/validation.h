// Internal to the trainer: the validation loss, computed by an eval job (job.mode = "eval") once
// and by a training job with validation.enable every validation.freq steps and after its last —
// the same function, so a training job's validation at step N is what an eval job of the step-N
// weights computes on the same mesh. CP-sharded like training, without gradients, on a sampler of
// its own, so the training batches, weights and losses are those of a run without validation.
#ifndef RINGTRAIN_WORKER_TRAINER_VALIDATION_H_
#define RINGTRAIN_WORKER_TRAINER_VALIDATION_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "worker/trainer/trainer_state.h"

namespace ringtrain {
namespace trainer_internal {

struct ValidationLoss {
  double mean = 0;     // nats per token, over every rank's tokens
  int64_t tokens = 0;  // global tokens: validation.steps × dp × validation.local_batch_size × L
};

// The validation data's spec: validation.dataset/dataset_path, or the training data's; synthetic
// data is held-out walks of the training source.
DatasetSpec ValidationDataSpec(const JobConfig& c, int64_t dp);
// Its sampler: sequential, validation.local_batch_size windows per dp rank, one micro-batch.
SamplerSpec ValidationSamplerSpec(const JobConfig& c, int64_t dp);

// Opens s.validation_dataset and s.validation_sampler (a training job with validation.enable).
absl::Status OpenValidationData(Trainer::State& s);

// The mean token loss over batches 0 .. validation.steps - 1 of `sampler` (the same batches every
// call): each rank's summed token losses, all-reduced, over the global token count; every rank
// returns the same value. Every rank must call it (collectives). Errors as a step's (Guarded).
absl::StatusOr<ValidationLoss> ComputeValidationLoss(Trainer::State& s,
                                                     const WindowSampler& sampler);

// Whether a training job validates after `step`: validation.enable, and `step` a multiple of
// validation.freq or the last.
bool ValidationDue(const JobConfig& config, int64_t step);

}  // namespace trainer_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_VALIDATION_H_
