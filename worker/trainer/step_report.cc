#include "worker/trainer/step_report.h"

#include <sys/resource.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ringtrain {
StepRecord ToStepRecord(const StepReport& r, std::vector<RankFigures> ranks) {
  StepRecord record;
  record.step = r.step;
  record.loss = r.loss;
  record.grad_norm = r.grad_norm;
  record.lr = r.lr;
  record.tokens_per_second = r.tokens_per_second;
  record.step_seconds = r.step_seconds;
  record.tokens = static_cast<double>(r.tokens);
  record.peak_memory_bytes = static_cast<double>(r.peak_memory_bytes);
  record.device_memory_peak_bytes = static_cast<double>(r.device_memory_peak_bytes);
  record.elapsed_seconds = r.elapsed_seconds;
  record.checkpoint_stall_seconds = r.checkpoint_stall_seconds;
  record.checkpoint_write_seconds = r.checkpoint_write_seconds;
  record.attention_imbalance = r.attention_imbalance;
  record.straggler_rank = static_cast<double>(r.straggler_rank);
  record.straggler_ratio = r.straggler_ratio;
  record.snapshot_step = static_cast<double>(r.snapshot_step);
  record.snapshot_buddy_offset = static_cast<double>(r.snapshot_buddy_offset);
  record.generation = static_cast<double>(r.generation);
  record.checkpoint_save_step = static_cast<double>(r.checkpoint_save_step);
  record.checkpoint_commit_step = static_cast<double>(r.checkpoint_commit_step);
  record.validation_loss = r.validation_loss;
  record.mfu_percent = r.mfu_percent;
  record.ranks = std::move(ranks);
  return record;
}

std::string StepReportJson(const StepReport& r, const std::vector<RankFigures>& ranks) {
  return ToStepRecord(r, ranks).ToJson();
}

std::string StepReportLine(const StepReport& r) {
  std::string line = absl::StrFormat(
      "step %*d/%d  loss %8.5f  grad_norm %8.4f  lr %.3e  tok/s %8.0f  step %6.3fs  mem %5.0f MiB",
      static_cast<int>(absl::StrCat(r.total_steps).size()), r.step, r.total_steps, r.loss,
      r.grad_norm, r.lr, r.tokens_per_second, r.step_seconds,
      double(r.peak_memory_bytes) / (1024.0 * 1024.0));
  if (r.mfu_percent) absl::StrAppendFormat(&line, "  mfu %5.2f%%", *r.mfu_percent);
  if (r.device_memory_peak_bytes > 0) {
    absl::StrAppendFormat(&line, "  device %5.0f MiB",
                          double(r.device_memory_peak_bytes) / (1024.0 * 1024.0));
  }
  return line;
}

JsonlWriter::~JsonlWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status JsonlWriter::Open(const std::string& path, bool append) {
  path_ = path;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot open metrics file '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status JsonlWriter::Write(const std::string& json_object) {
  if (file_ == nullptr) return absl::OkStatus();
  const std::string line = json_object + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot write metrics file '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

int64_t PeakMemoryBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;  // ru_maxrss is in KiB on Linux
}

}  // namespace ringtrain
