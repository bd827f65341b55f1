// Checkpoints: `folder/step-N/` holding
//   model.pt         the model's state dict (torchtitan names), readable by Python's torch.load
//   optimizer.pt     AdamW state (step, exp_avg.<name>, exp_avg_sq.<name>)
//   train_state.json step, data position as a global sample index, the torch CPU RNG state
//   config.toml      the effective job config, for the record
// Mesh-independent: parameters and optimizer state are replicated, so one copy is written, and the
// data position is a global sample index. A checkpoint is written into a hidden temporary folder
// and renamed into place only when complete, so a crash never leaves a partial `step-N`.
#ifndef RINGTRAIN_WORKER_ENGINE_CHECKPOINT_CHECKPOINT_H_
#define RINGTRAIN_WORKER_ENGINE_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/Tensor.h>
#include <torch/nn/module.h>

#include "absl/status/statusor.h"
#include "worker/engine/serialize/state_dict_io.h"

namespace ringtrain {

struct TrainState {
  int64_t step = 0;           // steps completed
  int64_t global_sample = 0;  // samples consumed: the next step starts here
  at::Tensor rng_state;       // torch's default CPU generator state (uint8)
};

struct Checkpoint {
  StateDict model;
  StateDict optimizer;
  TrainState train_state;
};

class CheckpointFolder {
 public:
  // `keep_latest_k` = 0 keeps every checkpoint.
  CheckpointFolder(std::string folder, int64_t keep_latest_k);

  // Writes step-N atomically, then removes all but the newest keep_latest_k.
  absl::Status Save(const Checkpoint& checkpoint, const std::string& config_toml);
  // The newest complete step-N, or nullopt when there is none (or the folder does not exist).
  absl::StatusOr<std::optional<int64_t>> LatestStep() const;
  // DATA_LOSS naming the file for a truncated or corrupt model.pt / optimizer.pt or a bad
  // train_state.json (ReadTrainState); NOT_FOUND for a missing one.
  absl::StatusOr<Checkpoint> Load(int64_t step) const;
  // The complete step-N, newest first (those LatestStep would consider).
  absl::StatusOr<std::vector<int64_t>> Steps() const;
  // The newest checkpoint that loads: a step whose files are damaged (Load's DATA_LOSS or
  // NOT_FOUND) is skipped with one line in `skipped` naming the step and what was wrong, and the
  // one before it tried. nullopt when the folder holds no checkpoint; DATA_LOSS naming the folder
  // when it holds some and none loads.
  absl::StatusOr<std::optional<Checkpoint>> LoadNewestUsable(
      std::vector<std::string>* skipped) const;
  std::string StepPath(int64_t step) const;

 private:
  std::string folder_;
  int64_t keep_latest_k_;
};

// A checkpoint's train_state.json. DATA_LOSS naming `path` when it is not JSON, a count is missing
// or not a non-negative integer, or the RNG state is not hex of the size torch's CPU generator
// state has (set_state would throw); NOT_FOUND when it is missing.
absl::StatusOr<TrainState> ReadTrainState(const std::string& path);

// Model parameters by name (torchtitan names), detached, in registration order.
StateDict ModelStateDict(const torch::nn::Module& model);

// Copies `weights` into the model's parameters, converting dtype (float32 or bfloat16 files).
// INVALID_ARGUMENT listing every missing, unexpected and mis-shaped tensor when names or shapes
// disagree; the model is unchanged then.
absl::Status LoadModelWeights(torch::nn::Module& model, const StateDict& weights,
                              const std::string& source);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_CHECKPOINT_CHECKPOINT_H_
