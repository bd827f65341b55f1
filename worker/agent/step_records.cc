#include "worker/agent/step_records.h"

#include <fstream>
#include <optional>
#include <set>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/record/step_record.h"
#include "worker/agent/job_paths.h"

namespace ringtrain {
namespace {

v1::AgentMessage Empty(const v1::StepRecordsRequest& request) {
  v1::AgentMessage message;
  v1::StepRecords* records = message.mutable_step_records();
  records->set_job_id(request.job_id());
  records->set_rank(request.rank());
  return message;
}

}  // namespace

std::vector<v1::AgentMessage> AnswerStepRecords(const std::string& work_dir,
                                                const v1::StepRecordsRequest& request) {
  std::vector<v1::AgentMessage> out = {Empty(request)};
  if (!CheckJobId(request.job_id()).ok() || request.rank() < 0) return out;
  const std::string path =
      absl::StrCat(work_dir, "/", request.job_id(), "/rank-", request.rank(), "/metrics.jsonl");
  std::set<int64_t> seen;
  size_t bytes = 0;
  // The current run's file, then the earlier runs' (rank_supervisor.cc keeps them as .1, .2, …).
  for (int n = 0;; ++n) {
    std::ifstream in(n == 0 ? path : absl::StrCat(path, ".", n));
    if (!in) {
      if (n == 0) continue;
      break;
    }
    std::string line;
    // getline on a last line without its newline: the trainer was killed mid-write; the parse
    // below refuses a torn record (and skips a line that is not a step, e.g. an eval's).
    while (std::getline(in, line)) {
      const absl::StatusOr<std::optional<StepRecord>> record =
          ParseStepRecord(line, MissingFigure::kZero);
      if (!record.ok() || !record->has_value()) continue;
      const int64_t step = (*record)->step;
      if (step < request.first_step() || step > request.last_step()) continue;
      if (!seen.insert(step).second) continue;
      if (bytes > 0 && bytes + line.size() > kStepRecordsChunkBytes) {
        out.back().mutable_step_records()->set_more(true);
        out.push_back(Empty(request));
        bytes = 0;
      }
      out.back().mutable_step_records()->add_record_json(line);
      bytes += line.size();
    }
  }
  return out;
}

}  // namespace ringtrain
