// Saving sharded checkpoints, synchronously or in the background (checkpoint.async_mode,
// torchtitan's "disabled" | "async").
//
//   sync   the training thread writes this rank's part (from the live tensors when they are
//          float32 on the CPU, else through host staging buffers), and rank 0 commits the step.
//   async  the training thread copies its pieces into host staging buffers (allocated at the first
//          save, pinned when the state is on a GPU, reused after) and goes on; a background thread
//          writes the part and, on rank 0, commits. The next save waits only while the previous is
//          still writing. A process killed mid-write leaves a temporary folder that resume never
//          reads and the next run removes.
//
// Both write the same bytes. Errors of a background write come back from the next Save or Finish.
#ifndef RINGTRAIN_WORKER_ENGINE_CHECKPOINT_CHECKPOINT_WRITER_H_
#define RINGTRAIN_WORKER_ENGINE_CHECKPOINT_CHECKPOINT_WRITER_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/serialize/state_reader.h"

namespace ringtrain {

struct CheckpointWriterOptions {
  int64_t rank = 0;
  int64_t writers = 1;  // ranks [0, writers) write a part; rank 0 commits
  std::string tag;      // the same on every rank of the run (CheckpointFolder::TemporaryPath)
  bool async = false;
  absl::Duration commit_timeout = absl::Minutes(10);  // how long rank 0 waits for the parts
};

// One save's figures, known once its write finished.
struct SaveFigures {
  int64_t step = 0;
  double stall_seconds = 0;  // the training thread held: waiting for the previous write + staging
  double write_seconds = 0;  // writing this rank's part (and, on rank 0, committing)
  uint64_t bytes = 0;        // this rank's part
};

class CheckpointWriter {
 public:
  CheckpointWriter(const CheckpointFolder& folder, CheckpointWriterOptions options);
  ~CheckpointWriter();  // waits for a write in flight
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Saves `train_state.step`: `pieces` are this rank's (GradientPath::CheckpointPieces; empty on a
  // rank that does not write). Returns the training thread's stall. An error of the previous
  // background write is returned here instead, and nothing is saved.
  absl::StatusOr<double> Save(const std::vector<StatePiece>& pieces, const TrainState& train_state,
                              const std::string& config_toml);
  // The figures of saves whose writes finished since the last call (waiting for the write in
  // flight when `wait`), or the error of a write that failed.
  absl::StatusOr<std::vector<SaveFigures>> Finished(bool wait);

 private:
  absl::Status Write(const std::vector<StatePiece>& pieces, const TrainState& train_state,
                     const std::string& config_toml);
  absl::Status Join();

  CheckpointFolder folder_;
  CheckpointWriterOptions options_;
  std::vector<at::Tensor> staging_;
  std::thread thread_;
  absl::Status thread_status_;
  std::atomic<bool> write_done_{false};
  std::optional<SaveFigures> in_flight_;
  std::vector<SaveFigures> finished_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_CHECKPOINT_CHECKPOINT_WRITER_H_
