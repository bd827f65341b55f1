// Reading the trainer's step metrics: a JSONL file (one JSON object per line, one line per step,
// written by rank 0 to --metrics.jsonl=PATH), e.g.
//   {"step": 1, "loss": 6.7041950225830078, "grad_norm": 2.5, "lr": 0.0003, "ranks": [...]}
// Only "step" and "loss" are read; every other field is ignored.
#ifndef RINGTRAIN_CLIENT_JSONL_H_
#define RINGTRAIN_CLIENT_JSONL_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace ringtrain {

// Step number → loss, in step order. Losses are parsed exactly: the trainer writes 17 significant
// digits, which round-trip a double.
using StepLosses = std::map<int, double>;

// Reads every non-empty line of the JSONL file at `path`. A JSON null loss (how a NaN is written)
// reads as NaN.
// Errors: NOT_FOUND when the file cannot be opened; INVALID_ARGUMENT naming the path and line
// number for a line that is not a JSON object, has no integer "step" or no numeric "loss", or
// repeats a step.
absl::StatusOr<StepLosses> ReadStepLosses(const std::string& path);

// The largest step among the parseable lines of a JSONL file that may still be being written
// (0 when there is none or the file is missing). Never fails; for progress display only.
int LastStepInFile(const std::string& path);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_JSONL_H_
