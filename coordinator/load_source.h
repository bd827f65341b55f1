// Jobs that build on jobs: what a job's checkpoints are, as its step records announced them, and
// the pure decisions of `ringctl submit --init-from / --resume-from JOB[@STEP]` — reading JOB@STEP,
// choosing the checkpoint, and whether the new job's config can load it. No store, no lock: the
// service hands in what it read (cluster_loads.cc).
#ifndef RINGTRAIN_COORDINATOR_LOAD_SOURCE_H_
#define RINGTRAIN_COORDINATOR_LOAD_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/job_config.h"
#include "coordinator/job.h"

namespace ringtrain {

// --init-from (the weights alone) or --resume-from (the whole training state).
enum class LoadKind { kInit, kResume };
const char* LoadFlag(LoadKind kind);  // "--init-from" | "--resume-from"

// JOB[@STEP] as given.
struct CheckpointRef {
  std::string job_id;
  std::optional<int64_t> step;  // nullopt: the newest complete checkpoint
};

inline constexpr size_t kMaxCheckpointRefBytes = 128;

// "job-000001" or "job-000001@200". INVALID_ARGUMENT naming `kind`'s flag, the text and the form
// expected: more than kMaxCheckpointRefBytes, an empty job, characters other than letters, digits,
// '-', '_' and '.', a STEP that is not a whole number of at least 1.
absl::StatusOr<CheckpointRef> ParseCheckpointRef(absl::string_view text, LoadKind kind);

// One checkpoint as `ringctl checkpoints` shows it.
struct ListedCheckpoint {
  int64_t step = 0;
  bool complete = false;
  std::string path;  // the step folder; "" while (or when) incomplete: no such folder yet
};

// What the store noted (JobStore::Checkpoints: every save that began or committed, by step) as it
// is on disk: the complete ones after keep_latest_k's removals (the newest k; 0 keeps all), and the
// saves that never committed. `folder` is the job's checkpoint.folder; paths are
// <checkpoint_root>/<job_id>/<folder>/step-N ("<checkpoint-root>" when the root is not known), or
// <folder>/step-N for an absolute folder. By step ascending.
std::vector<ListedCheckpoint> ListCheckpoints(const std::vector<SavedCheckpoint>& saved,
                                              const std::string& job_id, const std::string& folder,
                                              int64_t keep_latest_k);

// The checkpoint `ref` names among `listed` (ListCheckpoints of job `ref.job_id`, whose config
// `source` is): the step asked for, or the newest complete one. INVALID_ARGUMENT naming the job and
// the steps there are when the step is not among them; FAILED_PRECONDITION when the step (or
// every step) is not complete, or the job has none, saying why and what to do.
absl::StatusOr<ListedCheckpoint> ChooseCheckpoint(const CheckpointRef& ref, LoadKind kind,
                                                  const std::vector<ListedCheckpoint>& listed,
                                                  const JobConfig& source);

// Whether a job with config `target` can start from job `source_id`'s checkpoint of `step`, saved
// with config `source`: the model's parameter shapes must agree (model.dim, n_layers, n_heads,
// n_kv_heads, vocab_size, the head and FFN sizes as resolved, tie_word_embeddings; not checkable
// here when either names a Hugging Face folder: the trainer checks the tensors); --resume-from
// also needs a training job with training.steps above `step`. Any mesh loads any checkpoint
// (tensors by name in pieces, a global data position), so the mesh is never the reason.
// INVALID_ARGUMENT listing every key that differs, each with both values.
absl::Status CheckLoadCompatible(const JobConfig& source, const std::string& source_id,
                                 int64_t step, const JobConfig& target, LoadKind kind);

// The first step a job computes: 1, or after the step it resumes from (--resume-from).
int64_t FirstStep(const JobRecord& job);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_LOAD_SOURCE_H_
