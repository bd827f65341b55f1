// Internal to the trainer: what one rank holds while it runs (built by Trainer::Create in
// trainer.cc, used by the step loop in train_loop.cc), and the helpers both halves share.
#ifndef RINGTRAIN_WORKER_TRAINER_TRAINER_STATE_H_
#define RINGTRAIN_WORKER_TRAINER_TRAINER_STATE_H_

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/data/dataset.h"
#include "worker/engine/data/sampler.h"
#include "worker/engine/model/attention_kernel.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/optim/lr_schedule.h"
#include "worker/engine/parallel/comm.h"
#include "worker/engine/parallel/fsdp.h"
#include "worker/engine/parallel/mesh.h"
#include "worker/trainer/step_report.h"
#include "worker/trainer/trainer.h"

namespace ringtrain {

struct Trainer::State {
  JobConfig config;
  RankInfo rank;
  Mesh mesh;
  c10::Device device = c10::Device(c10::kCPU);  // the one place the device is chosen
  std::unique_ptr<Communicator> comm;  // null when world = 1
  std::shared_ptr<AttentionKernel> attention;
  std::unique_ptr<TokenDataset> dataset;
  std::optional<WindowSampler> sampler;
  Transformer model{nullptr};
  std::shared_ptr<Fsdp> fsdp;  // FSDP (mesh.sharded): the model's weights come from its shards
  std::vector<at::Tensor> params;  // what the optimizer updates: the parameters, or their shards
  std::unique_ptr<AdamW> optimizer;
  std::optional<LrSchedule> schedule;
  std::optional<CheckpointFolder> checkpoints;
  JsonlWriter jsonl;
  bool every_rank_writes_jsonl = false;
  TrainState train_state;
};

namespace trainer_internal {

// Runs `f` (returning absl::Status) and turns what LibTorch and c10d throw into a Status — the one
// boundary where exceptions end: CommError / c10::DistError → UNAVAILABLE, naming the lost peer
// (DiagnoseFailure); c10::OutOfMemoryError → RESOURCE_EXHAUSTED; anything else → INTERNAL.
// `what` starts the message ("step 3").
absl::Status Guarded(Trainer::State& s, const std::string& what,
                     const std::function<absl::Status()>& f);

// sharding.cc. FSDP: shards s.model over the FSDP group (its weights loaded first) and makes the
// shards s.params.
absl::Status ShardModel(Trainer::State& s);
// Loads an optimizer state in the replicated run's format (full tensors by name) into the sharded
// optimizer. INVALID_ARGUMENT naming `source` and what does not match.
absl::Status LoadShardedOptimizerState(Trainer::State& s, const StateDict& full, const std::string& source);
// The step's checkpoint: parameters and optimizer state as full tensors by name (with FSDP a
// collective of the group: every rank calls it, rank 0 writes).
Checkpoint CheckpointOf(Trainer::State& s);

}  // namespace trainer_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_TRAINER_STATE_H_
