// The config keys that name files, and the checks a path value can pass without knowing where it
// will be read. Workers confine every such path under their roots (worker/agent/job_paths.h): data
// (datasets, initial weights; read-only) or the job's own checkpoint folder. The coordinator runs
// CheckConfigPaths at submit time, so what it can tell (an absolute path, a '..' that climbs out)
// is refused before a job is queued.
#ifndef RINGTRAIN_COMMON_CONFIG_CONFIG_PATHS_H_
#define RINGTRAIN_COMMON_CONFIG_CONFIG_PATHS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/config/job_config.h"

namespace ringtrain {

enum class PathRoot {
  kData,        // read: datasets and initial weights (the worker's --data-root)
  kCheckpoint,  // written and read: the job's own folder under the worker's --checkpoint-root
};

struct ConfigPath {
  std::string key;    // "training.dataset_path"
  std::string value;  // as configured, never empty
  PathRoot root;
};

// The path keys the trainer will open for `config`, with their values; keys left empty or unused by
// the job (a synthetic dataset's path, a disabled checkpoint's folder, the training dataset in eval
// mode when validation names its own) are left out:
//   training.dataset_path        train mode, text/bin dataset                           kData
//   validation.dataset_path      eval mode or validation.enable, text/bin validation data (empty:
//                                the training path)
//   training.tokenizer_path      when set and the job reads a text dataset             kData
//   model.hf_assets_path         when set (a Hugging Face folder: config.json, …)      kData
//   checkpoint.initial_load_path when set (a file, or a Hugging Face folder)           kData
//   checkpoint.folder            train mode with checkpoint.enable                     kCheckpoint
//   metrics.save_tb_folder       metrics.enable_tensorboard                            kCheckpoint
// metrics.jsonl is not among them: the agent always sets it to a file of its own.
std::vector<ConfigPath> ConfigPaths(const JobConfig& config);

// `value` for `key` as text: not empty, no NUL or other control characters (C0 or C1), no
// bidirectional controls (common/printable.h: they would make it print as another path), and when
// relative, no ".." that climbs above where it starts ("a/../b" is fine, "../b" and "a/../../b"
// are not).
// Absolute paths pass (CheckConfigPaths refuses them; a worker resolves them against its roots).
// INVALID_ARGUMENT naming the key, the value (escaped) and what would work.
absl::Status CheckPathText(absl::string_view key, absl::string_view value);

// What the coordinator refuses at submit (coordinator/admission.cc; ringtrain-run, which reads
// the same config on one machine, takes any path): CheckPathText for every path of
// ConfigPaths(config), and every path relative — a data path to the workers' --data-root (each
// worker has its own, which the coordinator does not know), checkpoint.folder to the job's own
// folder, <checkpoint-root>/<job id>/, which no absolute path given at submit can name. The error
// lists every problem, each with its key, its value and what to give instead.
absl::Status CheckConfigPaths(const JobConfig& config);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_CONFIG_CONFIG_PATHS_H_
