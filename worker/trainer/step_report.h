// Step reports: one human line per logged step, and one JSON object per line per step in the JSONL
// file (the contract with the agent and loss-compare). Floats are written with 17 significant digits
// so that they round-trip exactly. Later fields (per-rank figures) go into the same record.
#ifndef RINGTRAIN_WORKER_TRAINER_STEP_REPORT_H_
#define RINGTRAIN_WORKER_TRAINER_STEP_REPORT_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/record/json_record.h"  // JsonRecord, FormatDouble17

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
};

// One rank's figures of the last step; every rank's are gathered to every rank after the step and
// written as the record's "ranks" array (what the agent exports per rank).
struct RankFigures {
  double attention_seconds = 0;      // wall time in attention block compute
  double attention_cpu_seconds = 0;  // this thread's CPU time in the same
  double comm_wait_seconds = 0;      // blocked on transfers/collectives
  int64_t bytes_sent = 0;
  int64_t peak_memory_bytes = 0;
  double ring_wait_seconds = 0;      // the part of ring transfers compute did not hide
  int64_t device_memory_peak_bytes = 0;  // CUDA caching allocator's peak in the step; 0 on the CPU

  // As doubles in the order above, for an all-gather of equal-length vectors, and back.
  std::vector<double> ToDoubles() const;
  static RankFigures FromDoubles(const std::vector<double>& values);  // values.size() == 7
};

// `[{"rank": 0, "attention_seconds": …, …}, …]`, one object per rank in rank order.
std::string RankFiguresJson(const std::vector<RankFigures>& ranks);

// The step's record; `ranks_json`, when not empty, is the per-rank figures array.
std::string StepReportJson(const StepReport& report, const std::string& ranks_json = "");
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
