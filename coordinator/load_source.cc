#include "coordinator/load_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/model_shape.h"
#include "common/printable.h"

namespace ringtrain {
namespace {

bool IsJobIdChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

std::string CompleteSteps(const std::vector<ListedCheckpoint>& listed) {
  std::vector<std::string> steps;
  for (const ListedCheckpoint& c : listed) {
    if (c.complete) steps.push_back(absl::StrCat(c.step));
  }
  return steps.empty() ? "none" : absl::StrJoin(steps, ", ");
}

// A model key whose value decides a parameter's shape, read from a config.
struct ShapeKey {
  const char* key;
  int64_t (*value)(const ModelSection& m);
};

constexpr ShapeKey kShapeKeys[] = {
    {"model.dim", [](const ModelSection& m) { return m.dim; }},
    {"model.n_layers", [](const ModelSection& m) { return m.n_layers; }},
    {"model.n_heads", [](const ModelSection& m) { return m.n_heads; }},
    {"model.n_kv_heads", [](const ModelSection& m) { return m.n_kv_heads; }},
    {"model.vocab_size", [](const ModelSection& m) { return m.vocab_size; }},
    {"model.head_dim", [](const ModelSection& m) { return HeadDim(m); }},
    {"model.intermediate_size", [](const ModelSection& m) { return FfnHiddenDim(m); }},
    {"model.tie_word_embeddings",
     [](const ModelSection& m) { return int64_t{m.tie_word_embeddings ? 1 : 0}; }},
};

}  // namespace

const char* LoadFlag(LoadKind kind) {
  return kind == LoadKind::kInit ? "--init-from" : "--resume-from";
}

absl::StatusOr<CheckpointRef> ParseCheckpointRef(absl::string_view text, LoadKind kind) {
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(LoadFlag(kind), " \"", Excerpt(text),
                                                   "\": ", why, "; expected JOB or JOB@STEP, e.g. ",
                                                   "job-000001 or job-000001@200"));
  };
  if (text.size() > kMaxCheckpointRefBytes) {
    return refuse(absl::StrCat("longer than ", kMaxCheckpointRefBytes, " bytes"));
  }
  CheckpointRef ref;
  const size_t at = text.find('@');
  const absl::string_view job = text.substr(0, at);
  if (job.empty()) return refuse("names no job");
  if (!std::all_of(job.begin(), job.end(), IsJobIdChar)) {
    return refuse("a job id has only letters, digits, '-', '_' and '.'");
  }
  ref.job_id = std::string(job);
  if (at == absl::string_view::npos) return ref;
  int64_t step = 0;
  if (!absl::SimpleAtoi(text.substr(at + 1), &step) || step < 1 ||
      !std::all_of(text.begin() + at + 1, text.end(), absl::ascii_isdigit)) {
    return refuse("STEP must be a whole number of at least 1");
  }
  ref.step = step;
  return ref;
}

std::vector<ListedCheckpoint> ListCheckpoints(const std::vector<SavedCheckpoint>& saved,
                                              const std::string& job_id, const std::string& folder,
                                              int64_t keep_latest_k) {
  std::vector<int64_t> complete;
  for (const SavedCheckpoint& s : saved) {
    if (s.complete) complete.push_back(s.step);
  }
  std::sort(complete.rbegin(), complete.rend());
  // The trainer removes all but the newest keep_latest_k complete steps after each commit.
  const int64_t oldest_kept = keep_latest_k > 0 && int64_t(complete.size()) > keep_latest_k
                                  ? complete[keep_latest_k - 1]
                                  : 0;
  std::vector<ListedCheckpoint> listed;
  for (const SavedCheckpoint& s : saved) {
    if (s.complete && s.step < oldest_kept) continue;
    ListedCheckpoint c{s.step, s.complete, ""};
    if (s.complete) {
      const std::string step_dir = absl::StrCat("step-", s.step);
      c.path =
          !folder.empty() && folder[0] == '/'
              ? absl::StrCat(folder, "/", step_dir)
              : absl::StrCat(s.checkpoint_root.empty() ? "<checkpoint-root>" : s.checkpoint_root,
                             "/", job_id, "/", folder, "/", step_dir);
    }
    listed.push_back(std::move(c));
  }
  std::sort(listed.begin(), listed.end(),
            [](const ListedCheckpoint& a, const ListedCheckpoint& b) { return a.step < b.step; });
  return listed;
}

absl::StatusOr<ListedCheckpoint> ChooseCheckpoint(const CheckpointRef& ref, LoadKind kind,
                                                  const std::vector<ListedCheckpoint>& listed,
                                                  const JobConfig& source) {
  const std::string& job = ref.job_id;
  if (source.job.mode == JobMode::kEval || !source.checkpoint.enable) {
    return absl::FailedPreconditionError(absl::StrCat(
        LoadFlag(kind), " ", job, ": ", job, " saves no checkpoints (",
        source.job.mode == JobMode::kEval ? "an eval job" : "checkpoint.enable = false",
        "); start from a job that ran with checkpoint.enable = true"));
  }
  if (ref.step) {
    const auto found = std::find_if(listed.begin(), listed.end(),
                                    [&](const ListedCheckpoint& c) { return c.step == *ref.step; });
    if (found == listed.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          LoadFlag(kind), " ", job, "@", *ref.step, ": ", job, " has no checkpoint of step ",
          *ref.step, "; its complete steps: ", CompleteSteps(listed), " (ringctl checkpoints ", job,
          ")"));
    }
    if (!found->complete) {
      return absl::FailedPreconditionError(absl::StrCat(
          LoadFlag(kind), " ", job, "@", *ref.step, ": ", job, "'s checkpoint of step ", *ref.step,
          " is not complete (its save has not committed); its complete steps: ",
          CompleteSteps(listed), " — wait for it, or name one of those"));
    }
    return *found;
  }
  for (auto c = listed.rbegin(); c != listed.rend(); ++c) {
    if (c->complete) return *c;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      LoadFlag(kind), " ", job, ": ", job, " has no complete checkpoint yet (one is saved every ",
      source.checkpoint.interval, " steps and after the last); wait for one (ringctl checkpoints ",
      job, ")"));
}

absl::Status CheckLoadCompatible(const JobConfig& source, const std::string& source_id,
                                 int64_t step, const JobConfig& target, LoadKind kind) {
  std::vector<std::string> problems;
  if (!source.hf_pending && !target.hf_pending) {
    for (const ShapeKey& k : kShapeKeys) {
      const int64_t was = k.value(source.model);
      const int64_t is = k.value(target.model);
      if (was != is) {
        problems.push_back(absl::StrCat(k.key, " = ", is, " here, ", was, " in ", source_id));
      }
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(LoadFlag(kind), " ", source_id, "@", step, ": the config's model cannot load ",
                     source_id, "'s checkpoint of step ", step,
                     ", its parameters have other shapes (", absl::StrJoin(problems, "; "),
                     "); give the model keys the values ", source_id, " was trained with"));
  }
  if (kind == LoadKind::kResume && target.job.mode == JobMode::kEval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--resume-from ", source_id, "@", step,
        ": an eval job reads only the weights; use --init-from ", source_id, "@", step));
  }
  if (kind == LoadKind::kResume && target.training.steps <= step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--resume-from ", source_id, "@", step, ": training.steps = ", target.training.steps,
        " leaves nothing to train after step ", step, "; set training.steps above ", step,
        " (the total, counting the steps ", source_id, " already trained)"));
  }
  return absl::OkStatus();
}

int64_t FirstStep(const JobRecord& job) {
  return job.load_from && !job.load_from->model_only ? job.load_from->step + 1 : 1;
}

}  // namespace ringtrain
