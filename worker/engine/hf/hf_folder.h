// Hugging Face model folders on disk: weights in (model.safetensors, or the shards that
// model.safetensors.index.json lists) and a whole folder out (config.json, safetensors shards, the
// index, tokenizer.json), through our safetensors reader and writer (common/safetensors).
#ifndef RINGTRAIN_WORKER_ENGINE_HF_HF_FOLDER_H_
#define RINGTRAIN_WORKER_ENGINE_HF_HF_FOLDER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config/job_config.h"
#include "common/safetensors/safetensors.h"
#include "worker/engine/model/model_args.h"
#include "worker/engine/serialize/state_dict_io.h"
#include "worker/engine/serialize/state_reader.h"

namespace ringtrain {

// Every tensor of the folder `dir` (Hugging Face names), in file order, each as stored (F32, BF16
// or F16; CPU, contiguous). NOT_FOUND when the folder has neither model.safetensors nor
// model.safetensors.index.json; DATA_LOSS naming the file for a corrupt header or index, a shard
// the index names that is missing, a tensor in two shards, or a short read; INVALID_ARGUMENT for a
// dtype other than F32, BF16 and F16.
absl::StatusOr<StateDict> ReadHfWeights(const std::string& dir);

// The folder's safetensors files opened (headers read and checked as ReadHfWeights checks them,
// no tensor read), and where each tensor (Hugging Face name) is.
struct HfShards {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  struct Place {
    const SafetensorsFile* file = nullptr;
    const TensorEntry* entry = nullptr;
  };
  std::map<std::string, Place> where;
};
absl::StatusOr<HfShards> OpenHfShards(const std::string& dir);

// A Hugging Face folder as a StateReader under our names (ParameterShapes of `args`): each Read
// pulls only the bytes of the elements asked for — whole row runs, and for wq / wk each of our
// rows from its RoPE-permuted row of theirs — converted to the reader's float32. Checked when
// opened as FromHfStateDict checks a whole state dict (INVALID_ARGUMENT naming `dir` and every
// missing, unexpected and wrongly shaped tensor); errors of OpenHfShards otherwise.
absl::StatusOr<std::unique_ptr<StateReader>> OpenHfStateReader(const std::string& dir,
                                                               const ModelArgs& args);

struct HfExportOptions {
  ModelSection model;                               // written as config.json
  MixedPrecision dtype = MixedPrecision::kFloat32;  // the tensors' dtype in the files
  uint64_t max_shard_bytes = 5'000'000'000;         // transformers' "5GB"
  std::string tokenizer_path;  // copied as tokenizer.json (a tiktoken file: its own name)
};

// Writes the folder `dir` from `hf` (Hugging Face names, ToHfStateDict): config.json,
// model.safetensors when everything fits one shard of max_shard_bytes, else
// model-0000K-of-0000N.safetensors with model.safetensors.index.json (transformers' layout), and
// the tokenizer. Built in a hidden sibling folder and renamed into place when complete, replacing
// an older `dir`; a crash never leaves a partial folder at `dir`. UNAVAILABLE naming the file when
// the OS refuses a write; the partial folder is removed then.
absl::Status WriteHfFolder(const std::string& dir, const StateDict& hf,
                           const HfExportOptions& options);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_HF_HF_FOLDER_H_
