// One rank of one job: builds the data, the model and the optimizer from a validated JobConfig and
// runs the step loop (job.mode = train) or the evaluation (job.mode = eval). Torch-free header.
#ifndef RINGTRAIN_WORKER_TRAINER_TRAINER_H_
#define RINGTRAIN_WORKER_TRAINER_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/config/device.h"
#include "common/config/mesh.h"

namespace ringtrain {

// Where this rank sits in the job's world (world 1 when run alone) and where to rendezvous.
struct RankInfo {
  int64_t rank = 0;
  int64_t world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  DeviceSpec device;  // the CPU, or cuda:N (CUDA builds only)
  // > 0: this trainer replaces a lost rank in generation n of a world healing in place
  // ($RINGTRAIN_HEAL_GENERATION): it takes its state from its buddy's snapshot, not from storage.
  int64_t heal_generation = 0;
};

class Trainer {
 public:
  // Rendezvous with the other ranks (world > 1), opens the datasets, builds and initialises (or
  // loads) the model with its attention plan (ring attention when cp > 1), resumes from the newest
  // checkpoint in checkpoint.folder when checkpointing is enabled. Errors name the file or key.
  // `mesh` is ResolveMesh(config, rank.world_size)'s.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const JobConfig& config,
                                                         const MeshDegrees& degrees, RankInfo rank);
  ~Trainer();

  // Runs job.mode: the training loop to training.steps, or the evaluation. Errors: UNAVAILABLE
  // when a collective or transfer failed (naming the lost peer when there is one), INVALID_ARGUMENT
  // when the config diverges (non-finite loss or gradient norm), RESOURCE_EXHAUSTED when LibTorch
  // runs out of memory, INTERNAL for anything else (a bug), and the file's error when a checkpoint
  // or the JSONL report cannot be written.
  absl::Status Run();

 public:
  struct State;  // defined in trainer_state.h

 private:
  explicit Trainer(std::unique_ptr<State> state);
  absl::Status Train();
  absl::Status Evaluate();

  std::unique_ptr<State> state_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_TRAINER_H_
