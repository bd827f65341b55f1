// A sharded checkpoint's files (DCP's layout in safetensors): each writing rank's part of the
// training state in its own file, one small index, and a completeness marker.
//
//   step-N/rank-00000.safetensors   rank 0's pieces: one 1-D float32 tensor per piece, named as its
//   step-N/rank-00001.safetensors   state tensor ("model.<param>", "optimizer.exp_avg.<param>", …);
//   …                               the file's metadata gives each piece's global shape and range
//   step-N/index.json               every tensor's global shape and pieces (file, begin, end), and
//                                   every part file's size
//   step-N/train_state.json         step, data position, optimizer step, RNG state
//   step-N/config.toml              the effective job config, for the record
//   step-N/COMPLETE                 written last: without it the step does not exist for resume
//
// Every rank writes its part into the save's temporary folder (.tmp-step-N-<tag>, the tag the same
// on every rank of a run) under a temporary name and renames it; rank 0 waits for every part,
// checks and indexes them, renames the folder to step-N and writes COMPLETE.
#ifndef RINGTRAIN_WORKER_ENGINE_CHECKPOINT_SHARDED_CHECKPOINT_H_
#define RINGTRAIN_WORKER_ENGINE_CHECKPOINT_SHARDED_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/safetensors/safetensors.h"
#include "worker/engine/serialize/state_reader.h"

namespace ringtrain {

inline constexpr char kCheckpointIndexFile[] = "index.json";
inline constexpr char kCheckpointCompleteFile[] = "COMPLETE";
inline constexpr char kTrainStateFile[] = "train_state.json";

// "rank-00003.safetensors".
std::string RankPartName(int64_t rank);

// Writes `pieces` (their data float32, contiguous, on the CPU) as DIR/RankPartName(rank): first
// under a hidden temporary name, fsync'd, then renamed. UNAVAILABLE naming the file when the OS
// refuses.
absl::Status WriteRankPart(const std::string& dir, int64_t rank,
                           const std::vector<StatePiece>& pieces);

// Waits (polling, up to `timeout`) until DIR holds the parts of ranks [0, writers), then checks
// that their pieces tile every tensor exactly, and writes DIR/index.json. DEADLINE_EXCEEDED naming
// the ranks whose parts never came; DATA_LOSS naming the part when one is unreadable or the pieces
// overlap or leave a gap.
absl::Status IndexParts(const std::string& dir, int64_t writers, absl::Duration timeout);

// An index's view of a step folder, checked when opened: every part file is there with the size the
// index recorded, every piece is in its file with its length, and the pieces tile each tensor.
// Read pulls only the byte ranges asked for. DATA_LOSS naming the file for anything wrong.
class ShardedStateReader : public StateReader {
 public:
  static absl::StatusOr<std::unique_ptr<ShardedStateReader>> Open(const std::string& step_dir);

  const std::string& source() const override { return dir_; }
  const std::map<std::string, StoredTensor>& tensors() const override { return tensors_; }
  absl::Status Read(const std::string& name, int64_t begin, int64_t end,
                    const at::Tensor& out) const override;

 private:
  struct Piece {
    int64_t begin = 0, end = 0;
    size_t file = 0;
    const TensorEntry* entry = nullptr;
  };
  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, StoredTensor> tensors_;
  std::map<std::string, std::vector<Piece>> pieces_;  // by begin
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_CHECKPOINT_SHARDED_CHECKPOINT_H_
