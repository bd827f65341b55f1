#include "worker/engine/hf/model_files.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/config/hf_config.h"
#include "common/status_macros.h"
#include "common/text_file.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/checkpoint/sharded_checkpoint.h"
#include "worker/engine/hf/hf_adapter.h"
#include "worker/engine/hf/hf_folder.h"
#include "worker/engine/model/model_args.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

bool IsFile(const fs::path& path) {
  std::error_code e;
  return !path.empty() && fs::is_regular_file(path, e);
}

}  // namespace

absl::StatusOr<ModelFiles> ReadHfModel(const std::string& dir) {
  const fs::path folder(dir);
  RT_ASSIGN_OR_RETURN(const std::string text, ReadTextFile((folder / "config.json").string()));
  ModelFiles files;
  files.source = dir;
  RT_ASSIGN_OR_RETURN(files.model, ParseHfConfig(text, (folder / "config.json").string()));
  RT_ASSIGN_OR_RETURN(const StateDict hf, ReadHfWeights(dir));
  RT_ASSIGN_OR_RETURN(files.weights, FromHfStateDict(hf, ModelArgs::FromConfig(files.model), dir));
  if (IsFile(folder / "tokenizer.json"))
    files.tokenizer_path = (folder / "tokenizer.json").string();
  return files;
}

absl::StatusOr<ModelFiles> ReadCheckpointModel(const std::string& dir) {
  fs::path step(dir);
  const bool is_step = IsFile(step / "config.toml") &&
                       (IsFile(step / kCheckpointCompleteFile) || IsFile(step / "model.pt"));
  if (!is_step) {
    CheckpointFolder folder(dir, 0);
    RT_ASSIGN_OR_RETURN(const std::optional<int64_t> latest, folder.LatestStep());
    if (!latest) {
      return absl::NotFoundError(absl::StrCat(
          dir,
          " is neither a checkpoint step (config.toml with COMPLETE, or model.pt) nor a "
          "checkpoint folder with a complete step-N"));
    }
    step = folder.StepPath(*latest);
  }
  RT_ASSIGN_OR_RETURN(const std::string toml, ReadTextFile((step / "config.toml").string()));
  RT_ASSIGN_OR_RETURN(const JobConfig config,
                      ParseJobConfig(toml, {}, (step / "config.toml").string()));
  ModelFiles files;
  files.source = step.string();
  files.model = config.model;
  RT_ASSIGN_OR_RETURN(const StoredCheckpoint ckpt, OpenCheckpointStep(step.string()));
  RT_ASSIGN_OR_RETURN(
      files.weights,
      ReadFullModel(*ckpt.state, "model.", ParameterShapes(ModelArgs::FromConfig(config.model))));
  const fs::path job_tokenizer(config.training.tokenizer_path);
  const fs::path hf_tokenizer = config.model.hf_assets_path.empty()
                                    ? fs::path()
                                    : fs::path(config.model.hf_assets_path) / "tokenizer.json";
  if (IsFile(job_tokenizer)) {
    files.tokenizer_path = job_tokenizer.string();
  } else if (IsFile(hf_tokenizer)) {
    files.tokenizer_path = hf_tokenizer.string();
  }
  return files;
}

}  // namespace ringtrain
