// A trained model on disk, whichever way it was saved: a Hugging Face folder or a ringtrain
// checkpoint. What the tools that read models (ringtrain-generate, ringtrain-convert) need from
// either: the architecture, the weights under our names, and the tokenizer when there is one.
#ifndef RINGTRAIN_WORKER_ENGINE_HF_MODEL_FILES_H_
#define RINGTRAIN_WORKER_ENGINE_HF_MODEL_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/config/job_config.h"
#include "worker/engine/serialize/state_dict_io.h"

namespace ringtrain {

struct ModelFiles {
  ModelSection model;          // the architecture
  StateDict weights;           // our names (ParameterShapes order), each in its stored dtype
  std::string tokenizer_path;  // a tokenizer file that exists, or "" (none known)
  std::string source;          // the folder read, for messages
};

// DIR/config.json (ParseHfConfig) and its safetensors (ReadHfWeights, FromHfStateDict); the
// tokenizer is DIR/tokenizer.json when present.
absl::StatusOr<ModelFiles> ReadHfModel(const std::string& dir);

// A checkpoint step folder (step-N: sharded or legacy, with config.toml), or a checkpoint folder,
// whose newest complete step is read. The tokenizer is the job's training.tokenizer_path, else
// model.hf_assets_path's tokenizer.json, when the file exists.
absl::StatusOr<ModelFiles> ReadCheckpointModel(const std::string& dir);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_HF_MODEL_FILES_H_
