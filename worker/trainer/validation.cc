// The validation loss (validation.h) and the eval job (Trainer::Evaluate). Dimension letters: B
// validation.local_batch_size, L sequence length, Lc = L / cp.
#include "worker/trainer/validation.h"

#include <torch/torch.h>

#include <chrono>

#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/status_macros.h"
#include "worker/engine/parallel/grad_sync.h"

namespace ringtrain {
namespace trainer_internal {

DatasetSpec ValidationDataSpec(const JobConfig& c, int64_t dp) {
  DatasetSpec spec = TrainingDataSpec(c, dp, /*micro_batches=*/1);
  if (c.validation.dataset.has_value()) spec.kind = *c.validation.dataset;
  if (!c.validation.dataset_path.empty()) spec.path = c.validation.dataset_path;
  // Synthetic validation data: held-out walks on the training source.
  spec.sample_stream = 1;
  spec.min_tokens =
      c.validation.steps * dp * c.validation.local_batch_size * c.training.seq_len + 1;
  return spec;
}

SamplerSpec ValidationSamplerSpec(const JobConfig& c, int64_t dp) {
  SamplerSpec spec;
  spec.kind = SamplerKind::kSequential;
  spec.seq_len = c.training.seq_len;
  spec.local_batch_size = c.validation.local_batch_size;
  spec.micro_batches = 1;
  spec.dp_degree = dp;
  spec.seed = static_cast<uint64_t>(c.training.seed);
  return spec;
}

absl::Status OpenValidationData(Trainer::State& s) {
  {
    const progress::ScopedPhase io(progress::Phase::kIo);
    RT_ASSIGN_OR_RETURN(s.validation_dataset, OpenDataset(ValidationDataSpec(s.config, s.mesh.dp)));
  }
  RT_ASSIGN_OR_RETURN(WindowSampler sampler,
                      WindowSampler::Create(s.validation_dataset.get(),
                                            ValidationSamplerSpec(s.config, s.mesh.dp)));
  s.validation_sampler.emplace(std::move(sampler));
  RT_LOG(Info) << "validation data: " << s.validation_dataset->Describe() << "; every "
               << s.config.validation.freq << " steps, " << s.config.validation.steps
               << " batches of " << s.config.validation.local_batch_size << " per dp rank";
  return absl::OkStatus();
}

absl::StatusOr<ValidationLoss> ComputeValidationLoss(Trainer::State& s,
                                                     const WindowSampler& sampler) {
  const JobConfig& c = s.config;
  double loss_sum = 0;
  int64_t tokens = 0;
  RT_RETURN_IF_ERROR(Guarded(s, "validation", [&]() -> absl::Status {
    torch::NoGradGuard no_grad;
    for (int64_t batch_index = 0; batch_index < c.validation.steps; ++batch_index) {
      // (B, L) → (B, Lc) per rank; the loss is this rank's sum of token losses.
      const ShardedBatch shard =
          ShardBatch(s, sampler.BatchForStep(batch_index, s.mesh.dp_rank(), /*micro_batch=*/0));
      loss_sum += s.model->Loss(shard.inputs, shard.positions, shard.labels).item<double>();
      tokens += sampler.global_batch() * c.training.seq_len;
    }
    if (s.comm) loss_sum = AllReduceSum(*s.comm, loss_sum);
    return absl::OkStatus();
  }));
  return ValidationLoss{loss_sum / double(tokens), tokens};
}

bool ValidationDue(const JobConfig& config, int64_t step) {
  const ValidationSection& v = config.validation;
  return v.enable && (step % v.freq == 0 || step == config.training.steps);
}

}  // namespace trainer_internal

// The eval job: one record, step 1 of 1, whose loss and validation_loss are the validation loss,
// so the coordinator stores it and `ringctl get`/`watch` show it like a step.
absl::Status Trainer::Evaluate() {
  State& s = *state_;
  const auto start = std::chrono::steady_clock::now();
  RT_ASSIGN_OR_RETURN(const trainer_internal::ValidationLoss result,
                      trainer_internal::ComputeValidationLoss(s, *s.sampler));
  if (s.rank.rank == 0) {
    RT_LOG(Info) << absl::StrFormat("validation loss %.6f over %d tokens (%d batches)", result.mean,
                                    result.tokens, s.config.validation.steps);
  }
  StepReport report;
  report.step = 1;
  report.total_steps = 1;
  report.loss = result.mean;
  report.validation_loss = result.mean;
  report.tokens = result.tokens;
  report.step_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.elapsed_seconds = report.step_seconds;
  report.tokens_per_second = double(result.tokens) / report.step_seconds;
  report.peak_memory_bytes = PeakMemoryBytes();
  return trainer_internal::WriteRecord(s, ToStepRecord(report, {}));
}

}  // namespace ringtrain
