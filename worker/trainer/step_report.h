// Step reports: one human line per logged step, and one StepRecord (common/record/step_record.h)
// per line per step in the JSONL file, the contract with the agent, the coordinator and ringctl.
#ifndef RINGTRAIN_WORKER_TRAINER_STEP_REPORT_H_
#define RINGTRAIN_WORKER_TRAINER_STEP_REPORT_H_

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/record/json_record.h"  // JsonRecord, FormatDouble17
#include "common/record/step_record.h"

namespace ringtrain {

struct StepReport {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  double tokens_per_second = 0;
  double step_seconds = 0;
  int64_t tokens = 0;  // global tokens in this step
  int64_t peak_memory_bytes = 0;
  // The CUDA caching allocator's peak allocated bytes during the step (rank 0's); 0 on the CPU.
  int64_t device_memory_peak_bytes = 0;
  double elapsed_seconds = 0;
  double checkpoint_stall_seconds = 0;  // StepRecord's
  double checkpoint_write_seconds = 0;
  double attention_imbalance = 1;  // StepRecord's
  int64_t straggler_rank = -1;     // StepRecord's
  double straggler_ratio = 0;
  int64_t snapshot_step = 0;  // StepRecord's
  int64_t snapshot_buddy_offset = 0;
  int64_t generation = 0;                 // StepRecord's
  int64_t checkpoint_save_step = 0;       // StepRecord's
  int64_t checkpoint_commit_step = 0;     // StepRecord's
  std::optional<double> validation_loss;  // StepRecord's
  std::optional<double> mfu_percent;      // StepRecord's
};

// The step's record (common/record/step_record.h, the contract with the agent, the coordinator and
// ringctl): the report's figures and `ranks`, every rank's figures in rank order (empty: none).
StepRecord ToStepRecord(const StepReport& report, std::vector<RankFigures> ranks);
// ToStepRecord(report, ranks).ToJson(): one line, without the newline.
std::string StepReportJson(const StepReport& report, const std::vector<RankFigures>& ranks = {});
std::string StepReportLine(const StepReport& report);

// Appends records to the JSONL file, flushing after each so a reader sees whole lines as they come.
class JsonlWriter {
 public:
  JsonlWriter() = default;
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  // `append` keeps existing lines (a resumed run continues the file); otherwise truncates.
  absl::Status Open(const std::string& path, bool append);
  absl::Status Write(const std::string& json_object);
  bool is_open() const { return file_ != nullptr; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// Peak resident memory of this process (getrusage), in bytes.
int64_t PeakMemoryBytes();

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_STEP_REPORT_H_
