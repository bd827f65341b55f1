// FuzzAgentRecord: the trainer's JSONL step records as the agent reads them. The agent exports them
// as metrics; a record it cannot use must be ignored, never take the agent down.
//
// Every reader of the record (the agent, the coordinator's cluster_records.cc, ringctl) parses it
// with the one ParseStepRecord (common/record/step_record.h): the agent with MissingFigure::kNaN,
// and each line is also parsed here with kZero, the coordinator's and ringctl's rule.
#include <string>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/record/step_record.h"
#include "fuzz/fuzz_targets.h"
#include "worker/agent/agent_metrics.h"

namespace ringtrain::fuzz {

std::string FuzzAgentRecord(const uint8_t* data, size_t size) {
  AgentMetrics metrics;
  metrics.TrainerStarted("job-000001", /*rank=*/1, /*world_size=*/2);
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (absl::string_view line : absl::StrSplit(bytes, '\n')) {
    metrics.TrainerRecord(std::string(line));
    (void)ParseStepRecord(line, MissingFigure::kZero);
  }
  if (metrics.Collect().empty()) return "Collect() returned no metric families";
  return "";
}

}  // namespace ringtrain::fuzz
