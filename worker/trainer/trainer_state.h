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
#include "common/tensorboard/event_file.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/checkpoint/checkpoint_writer.h"
#include "worker/engine/data/dataset.h"
#include "worker/engine/data/sampler.h"
#include "worker/engine/hf/hf_adapter.h"
#include "worker/engine/hf/hf_folder.h"
#include "worker/engine/model/attention_plan.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/optim/lr_schedule.h"
#include "worker/engine/parallel/comm.h"
#include "worker/engine/parallel/gradient_path.h"
#include "worker/engine/parallel/mesh.h"
#include "worker/engine/parallel/parallelize.h"
#include "worker/trainer/memory_snapshots.h"
#include "worker/trainer/mfu.h"
#include "worker/trainer/step_report.h"
#include "worker/trainer/straggler.h"
#include "worker/trainer/trainer.h"

namespace ringtrain {

struct Trainer::State {
  JobConfig config;
  RankInfo rank;
  Mesh mesh;
  c10::Device device = c10::Device(c10::kCPU);  // the one place the device is chosen
  std::unique_ptr<Communicator> comm;           // null when world = 1
  std::unique_ptr<TokenDataset> dataset;
  std::optional<WindowSampler> sampler;
  // validation.enable in a training job: the validation data and its sequential sampler (an eval
  // job's are `dataset` and `sampler`).
  std::unique_ptr<TokenDataset> validation_dataset;
  std::optional<WindowSampler> validation_sampler;
  Transformer model{nullptr};
  // Parallelize's (worker/engine/parallel/parallelize.h): the model's attention plan, how a batch
  // is split over the CP group, and the gradient path (replicated or FSDP) with the optimizer.
  std::shared_ptr<AttentionPlan> attention;
  std::optional<DataSharding> data;
  // This step's attention work per cp rank of this rank's CP group (visible query-key pairs,
  // summed over the micro-batches): the load balancer's result, for the step record.
  std::vector<int64_t> step_cp_work;
  std::unique_ptr<GradientPath> gradients;
  std::optional<LrSchedule> schedule;
  std::optional<CheckpointFolder> checkpoints;
  std::unique_ptr<CheckpointWriter> checkpoint_writer;  // when checkpoints are on
  JsonlWriter jsonl;
  bool every_rank_writes_jsonl = false;
  std::unique_ptr<EventFileWriter> tensorboard;  // metrics.enable_tensorboard, rank 0
  std::optional<StragglerDetector> stragglers;   // metrics.straggler_window > 0 and world > 1
  std::optional<Straggler> straggler;            // the rank named after the last step
  std::optional<MfuBasis> mfu;                   // training runs with a known peak (mfu.h)
  TrainState train_state;
  // checkpoint.memory_interval (heal.h): the snapshots, the world's generation (0 at start, n
  // after the n-th heal) and where the agent writes a heal instruction ($RINGTRAIN_CONTROL_FILE).
  std::unique_ptr<MemorySnapshots> snapshots;
  int64_t snapshot_offset = 0;  // the run's buddy offset (SnapshotOffset), reported in records
  int64_t generation = 0;
  std::string control_file;
  // The run's checkpoint save tag (AgreeOnSaveTag: rank 0's pid and start time).
  double tag_pid = 0, tag_ms = 0;
};

namespace trainer_internal {

// Runs `f` (returning absl::Status) and turns what LibTorch and c10d throw into a Status — the one
// boundary where exceptions end: CommError / c10::DistError → UNAVAILABLE, naming the lost peer
// (DiagnoseFailure); c10::OutOfMemoryError → RESOURCE_EXHAUSTED; anything else → INTERNAL.
// `what` starts the message ("step 3").
absl::Status Guarded(Trainer::State& s, const std::string& what,
                     const std::function<absl::Status()>& f);

// checkpoint.enable: the folder and the writer for this run's saves, under the save tag
// (s.tag_pid, s.tag_ms).
void OpenCheckpointWriter(Trainer::State& s);

// The training data's spec; `micro_batches` = A: a step reads dp × A × local_batch_size windows.
DatasetSpec TrainingDataSpec(const JobConfig& c, int64_t dp, int64_t micro_batches);

// cp_shard, the one place a batch is split: inputs, labels and positions together, (B, Lc) each,
// on the rank's device.
ShardedBatch ShardBatch(const Trainer::State& s, const TokenBatch& batch);

// A step's record: to the JSONL file (rank 0, or every rank when asked) and, with
// metrics.enable_tensorboard, its scalars to rank 0's event file.
absl::Status WriteRecord(Trainer::State& s, const StepRecord& record);

}  // namespace trainer_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_TRAINER_STATE_H_
