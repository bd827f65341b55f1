// The training state as pieces and as a source to read pieces from — what a sharded checkpoint is
// made of, and what every way of loading weights (a sharded checkpoint, a torch.save file, a
// Hugging Face folder) offers, so that a rank reads only the elements it holds.
//
// Names: a checkpoint's tensors are "model.<parameter>" and "optimizer.exp_avg.<parameter>",
// "optimizer.exp_avg_sq.<parameter>" (parameters by their torchtitan names); a file of weights
// alone (initial_load_path) holds "<parameter>". Callers pass the prefix.
#ifndef RINGTRAIN_WORKER_ENGINE_SERIALIZE_STATE_READER_H_
#define RINGTRAIN_WORKER_ENGINE_SERIALIZE_STATE_READER_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

#include "absl/status/status.h"
#include "worker/engine/serialize/state_dict_io.h"

namespace ringtrain {

// Elements [begin, end) of one tensor of the state, flattened row-major. `data` holds them (1-D,
// end - begin elements, float32, any device; a view of the live state when a gradient path gives
// it).
struct StatePiece {
  std::string name;
  std::vector<int64_t> shape;  // the whole tensor's
  int64_t begin = 0;
  int64_t end = 0;
  at::Tensor data;
};

struct StoredTensor {
  std::vector<int64_t> shape;
  std::string dtype;     // as stored: "float32", "bfloat16", "F32", ...
  bool floating = true;  // a floating-point dtype (anything else cannot be loaded)
};

class StateReader {
 public:
  virtual ~StateReader() = default;
  // What the source is, for messages: a file or folder.
  virtual const std::string& source() const = 0;
  // Every tensor the source holds.
  virtual const std::map<std::string, StoredTensor>& tensors() const = 0;
  // Elements [begin, end) of `name` flattened, converted into `out` (contiguous, CPU, end - begin
  // elements, a floating dtype). NOT_FOUND for a name the source lacks; INVALID_ARGUMENT for a
  // range outside it; DATA_LOSS naming the file when the bytes cannot be read.
  virtual absl::Status Read(const std::string& name, int64_t begin, int64_t end,
                            const at::Tensor& out) const = 0;
  // Bytes Read has pulled from the source so far (as stored): what a load cost this rank.
  uint64_t bytes_read() const { return bytes_read_; }

 protected:
  mutable uint64_t bytes_read_ = 0;
};

// Tensors in memory (a torch.save file read whole, a legacy checkpoint's model.pt and
// optimizer.pt): each dict's names get its prefix.
class DictStateReader : public StateReader {
 public:
  DictStateReader(std::string source, std::vector<std::pair<std::string, StateDict>> prefixed);
  const std::string& source() const override { return source_; }
  const std::map<std::string, StoredTensor>& tensors() const override { return tensors_; }
  absl::Status Read(const std::string& name, int64_t begin, int64_t end,
                    const at::Tensor& out) const override;

 private:
  std::string source_;
  std::map<std::string, at::Tensor> values_;
  std::map<std::string, StoredTensor> tensors_;
};

// The names and shapes a model (or its optimizer) expects, in its order.
using ExpectedShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// OK when `reader` holds prefix + name for every expected name with its shape and a floating dtype,
// and no other name starting with `prefix`. Otherwise INVALID_ARGUMENT "state dict '<source>' does
// not match the model:" then a line each for the missing, unexpected and wrong-shaped tensors.
absl::Status CheckStateMatches(const StateReader& reader, const std::string& prefix,
                               const ExpectedShapes& expected);

// Reads all of prefix + `name` into a new float32 CPU tensor of its shape.
absl::StatusOr<at::Tensor> ReadWhole(const StateReader& reader, const std::string& name);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_SERIALIZE_STATE_READER_H_
