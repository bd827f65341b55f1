#include "client/checkpoint_format.h"

#include "absl/strings/str_cat.h"
#include "client/job_format.h"
#include "common/printable.h"

namespace ringtrain {
namespace {

const char* StateOf(const v1::Checkpoint& c) { return c.complete() ? "complete" : "incomplete"; }

// An incomplete save has no step folder (it never committed, or has not yet).
std::string PathOf(const v1::Checkpoint& c) { return c.path().empty() ? "-" : c.path(); }

}  // namespace

std::string LoadFromText(const v1::Job& job) {
  if (!job.has_load_from()) return "";
  const v1::CheckpointSource& s = job.load_from();
  return absl::StrCat(s.job_id(), "@", s.step(),
                      s.model_only() ? " (weights only: --init-from)"
                                     : " (the whole training state: --resume-from)");
}

std::vector<std::string> CheckpointLines(const v1::Job& job) {
  std::vector<std::string> lines;
  for (const v1::Checkpoint& c : job.checkpoints()) {
    lines.push_back(absl::StrCat("step ", c.step(), "  ", StateOf(c), "  ", PathOf(c)));
  }
  return lines;
}

std::string FormatCheckpointTable(const v1::Job& job) {
  if (job.checkpoints_size() == 0) {
    return EscapeForTerminal(absl::StrCat(
               job.job_id(), " has no checkpoints (", JobStateName(job.state()),
               "; a job saves them with checkpoint.enable = true, every checkpoint.interval "
               "steps and after the last)")) +
           "\n";
  }
  std::vector<std::vector<std::string>> rows;
  for (const v1::Checkpoint& c : job.checkpoints()) {
    rows.push_back({absl::StrCat(c.step()), StateOf(c), EscapeForTerminal(PathOf(c))});
  }
  return FormatTable({"STEP", "STATE", "PATH"}, rows);
}

}  // namespace ringtrain
