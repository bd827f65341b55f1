// Checkpoint folders: `folder/step-N/`, sharded (sharded_checkpoint.h: each rank's part of the
// parameters and AdamW state in safetensors, an index, train_state.json, config.toml, and the
// COMPLETE marker written last), or — read only, from before sharded saves — a legacy step holding
// model.pt and optimizer.pt (full tensors by name) with train_state.json. Either opens as a
// StateReader, so a run resumes on any mesh and each rank reads only what it holds. The data
// position is a global sample index.
#ifndef RINGTRAIN_WORKER_ENGINE_CHECKPOINT_CHECKPOINT_H_
#define RINGTRAIN_WORKER_ENGINE_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/Tensor.h>
#include <torch/nn/module.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/engine/serialize/state_dict_io.h"
#include "worker/engine/serialize/state_reader.h"

namespace ringtrain {

struct TrainState {
  int64_t step = 0;            // steps completed
  int64_t global_sample = 0;   // samples consumed: the next step starts here
  int64_t optimizer_step = 0;  // AdamW's step count
  at::Tensor rng_state;        // torch's default CPU generator state (uint8)
};

// A checkpoint opened for resuming: its train state and its tensors ("model.<param>",
// "optimizer.exp_avg.<param>", "optimizer.exp_avg_sq.<param>").
struct StoredCheckpoint {
  std::string path;  // the step folder
  TrainState train_state;
  std::unique_ptr<StateReader> state;
};

class CheckpointFolder {
 public:
  // `keep_latest_k` = 0 keeps every checkpoint.
  CheckpointFolder(std::string folder, int64_t keep_latest_k);

  const std::string& folder() const { return folder_; }
  std::string StepPath(int64_t step) const;
  // The folder a save of `step` is written in before it is complete: hidden, named by the save's
  // `tag` (the same on every rank of a run, so that all ranks write into one folder).
  std::string TemporaryPath(int64_t step, const std::string& tag) const;

  // The complete steps, newest first: sharded steps with COMPLETE, and legacy steps.
  absl::StatusOr<std::vector<int64_t>> Steps() const;
  // The newest complete step, or nullopt when there is none (or the folder does not exist).
  absl::StatusOr<std::optional<int64_t>> LatestStep() const;
  // Opens step-N, checking its files (ShardedStateReader::Open, ReadTrainState; a legacy step's
  // model.pt and optimizer.pt are read whole). DATA_LOSS naming the file for anything damaged or
  // missing.
  absl::StatusOr<StoredCheckpoint> Open(int64_t step) const;
  // The newest checkpoint that opens: a damaged step (Open's DATA_LOSS or NOT_FOUND) is skipped
  // with one line in `skipped` naming the step and what was wrong, and the one before it tried.
  // nullopt when the folder holds no checkpoint; DATA_LOSS naming the folder when it holds some and
  // none opens.
  absl::StatusOr<std::optional<StoredCheckpoint>> OpenNewestUsable(
      std::vector<std::string>* skipped) const;

  // Rank 0's end of a save whose parts ranks [0, writers) write into TemporaryPath(step, tag):
  // waits for them (IndexParts, up to `timeout`), writes train_state.json and config.toml, renames
  // the folder to step-N (replacing an older step-N), writes COMPLETE, then removes all but the
  // newest keep_latest_k steps. On failure the temporary folder is removed.
  absl::Status Commit(const TrainState& train_state, const std::string& config_toml,
                      const std::string& tag, int64_t writers, absl::Duration timeout) const;
  // Removes the temporary folders of saves that never completed (a process killed mid-write),
  // except those of `tag`.
  void RemoveIncomplete(const std::string& tag) const;

 private:
  std::string folder_;
  int64_t keep_latest_k_;
};

// A checkpoint's train_state.json. DATA_LOSS naming `path` when it is not JSON, a count is missing
// or not a non-negative integer, or the RNG state is not hex of the size torch's CPU generator
// state has (set_state would throw); NOT_FOUND when it is missing. optimizer_step is optional (a
// legacy step keeps it in optimizer.pt).
absl::StatusOr<TrainState> ReadTrainState(const std::string& path);
std::string TrainStateJson(const TrainState& train_state);

// Opens a step folder as CheckpointFolder::Open does.
absl::StatusOr<StoredCheckpoint> OpenCheckpointStep(const std::string& step_dir);

// Reads a whole model (prefix + name for each of `expected`, "model." in a checkpoint) into full
// float32 tensors by name, in `expected`'s order: for the tools (ringtrain-convert,
// ringtrain-generate) and the Hugging Face export, which hold the whole model by nature.
// INVALID_ARGUMENT (CheckStateMatches) when the names or shapes differ.
absl::StatusOr<StateDict> ReadFullModel(const StateReader& state, const std::string& prefix,
                                        const ExpectedShapes& expected);

// Model parameters by name (torchtitan names), detached, in registration order.
StateDict ModelStateDict(const torch::nn::Module& model);

// Copies `weights` into the model's parameters, converting dtype (float32 or bfloat16 files).
// INVALID_ARGUMENT listing every missing, unexpected and mis-shaped tensor when names or shapes
// disagree (CheckStateMatches); the model is unchanged then.
absl::Status LoadModelWeights(torch::nn::Module& model, const StateDict& weights,
                              const std::string& source);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_CHECKPOINT_CHECKPOINT_H_
