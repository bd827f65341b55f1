#include "common/config/config_paths.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/printable.h"

namespace ringtrain {
namespace {

// Whether the relative path's ".." components ever climb above its first folder.
bool ClimbsOut(absl::string_view relative) {
  int depth = 0;
  for (absl::string_view part : absl::StrSplit(relative, '/')) {
    if (part.empty() || part == ".") continue;
    depth += part == ".." ? -1 : 1;
    if (depth < 0) return true;
  }
  return false;
}

}  // namespace

std::vector<ConfigPath> ConfigPaths(const JobConfig& config) {
  std::vector<ConfigPath> paths;
  const auto add = [&](const char* key, const std::string& value, PathRoot root) {
    for (const ConfigPath& p : paths) {
      if (p.key == key) return;  // training.dataset_path read for training and validation
    }
    if (!value.empty()) paths.push_back({key, value, root});
  };
  const bool eval = config.job.mode == JobMode::kEval;
  // The validation data is read by an eval job, and by a training job that validates.
  const bool validates = eval || config.validation.enable;
  if (!eval && config.training.dataset != DatasetKind::kSynthetic) {
    add("training.dataset_path", config.training.dataset_path, PathRoot::kData);
  }
  if (validates &&
      config.validation.dataset.value_or(config.training.dataset) != DatasetKind::kSynthetic) {
    if (config.validation.dataset_path.empty()) {
      add("training.dataset_path", config.training.dataset_path, PathRoot::kData);
    } else {
      add("validation.dataset_path", config.validation.dataset_path, PathRoot::kData);
    }
  }
  // The tokenizer is read when a text dataset is.
  const bool validates_text = validates && config.validation.dataset.value_or(
                                               config.training.dataset) == DatasetKind::kText;
  const bool reads_text =
      validates_text || (!eval && config.training.dataset == DatasetKind::kText);
  if (reads_text) add("training.tokenizer_path", config.training.tokenizer_path, PathRoot::kData);
  add("model.hf_assets_path", config.model.hf_assets_path, PathRoot::kData);
  add("checkpoint.initial_load_path", config.checkpoint.initial_load_path, PathRoot::kData);
  if (!eval && config.checkpoint.enable) {
    add("checkpoint.folder", config.checkpoint.folder, PathRoot::kCheckpoint);
  }
  if (config.metrics.enable_tensorboard) {
    add("metrics.save_tb_folder", config.metrics.save_tb_folder, PathRoot::kCheckpoint);
  }
  return paths;
}

absl::Status CheckPathText(absl::string_view key, absl::string_view value) {
  const std::string shown =
      absl::StrCat(Excerpt(key), " = \"", absl::CHexEscape(Excerpt(value)), "\"");
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(shown, ": a path must not be empty"));
  }
  for (size_t i = 0; i < value.size();) {
    const auto [cp, length] = DecodeUtf8(value, i);
    if (length == 0) {  // a config's strings are UTF-8 (toml++ and the override parser check)
      ++i;
      continue;
    }
    if (IsControl(cp)) {
      return absl::InvalidArgumentError(
          absl::StrCat(shown, ": a path must not contain NUL or other control characters"));
    }
    if (IsBidiControl(cp)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: a path must not contain bidirectional controls (U+%04X at byte %d): "
                          "they make it print as "
                          "another path",
                          shown, cp, i));
    }
    i += length;
  }
  if (value.front() != '/' && ClimbsOut(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        shown,
        ": '..' climbs out of the folder it is resolved in (the worker's data root, or the "
        "job's checkpoint folder); give a path that stays inside it"));
  }
  return absl::OkStatus();
}

absl::Status CheckConfigPaths(const JobConfig& config) {
  std::vector<std::string> problems;
  for (const ConfigPath& path : ConfigPaths(config)) {
    if (absl::Status s = CheckPathText(path.key, path.value); !s.ok()) {
      problems.emplace_back(s.message());
    } else if (path.root == PathRoot::kData && path.value.front() == '/') {
      // Each worker reads data under its own --data-root, which the coordinator does not know:
      // only a path relative to it means the same file on every worker.
      const size_t slash = path.value.find_last_of('/');
      const std::string example =
          slash + 1 < path.value.size() ? path.value.substr(slash + 1) : "train.bin";
      problems.push_back(absl::StrCat(
          Excerpt(path.key), " = \"", absl::CHexEscape(Excerpt(path.value)),
          "\": an absolute path; workers read data only under their --data-root (ringtrain-worker "
          "--data-root DIR, or `ringctl up --data-root DIR`), so give a path relative to it, e.g. "
          "\"",
          absl::CHexEscape(Excerpt(example)), "\" for DIR/", absl::CHexEscape(Excerpt(example))));
    } else if (path.root == PathRoot::kCheckpoint && path.value.front() == '/') {
      // The job's checkpoint folder is made under <checkpoint-root>/<job id>/, which no submitted
      // absolute path can name (the id is given at submit).
      problems.push_back(absl::StrCat(
          Excerpt(path.key), " = \"", absl::CHexEscape(Excerpt(path.value)),
          "\": an absolute path; checkpoints go into the job's own folder on the workers "
          "(<checkpoint-root>/<job id>/), so give a path relative to it, e.g. \"checkpoints\""));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid paths in the job config:\n  ", absl::StrJoin(problems, "\n  ")));
}

}  // namespace ringtrain
