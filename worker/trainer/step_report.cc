#include "worker/trainer/step_report.h"

#include <sys/resource.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ringtrain {
std::string StepReportJson(const StepReport& r, const std::string& ranks_json) {
  JsonRecord record;
  record.Add("step", r.step)
      .Add("loss", r.loss)
      .Add("grad_norm", r.grad_norm)
      .Add("lr", r.lr)
      .Add("tokens_per_second", r.tokens_per_second)
      .Add("step_seconds", r.step_seconds)
      .Add("tokens", r.tokens)
      .Add("peak_memory_bytes", r.peak_memory_bytes)
      .Add("device_memory_peak_bytes", r.device_memory_peak_bytes)
      .Add("elapsed_seconds", r.elapsed_seconds);
  if (!ranks_json.empty()) record.AddRaw("ranks", ranks_json);
  return record.str();
}

std::string StepReportLine(const StepReport& r) {
  std::string line = absl::StrFormat(
      "step %*d/%d  loss %8.5f  grad_norm %8.4f  lr %.3e  tok/s %8.0f  step %6.3fs  mem %5.0f MiB",
      static_cast<int>(absl::StrCat(r.total_steps).size()), r.step, r.total_steps, r.loss,
      r.grad_norm, r.lr, r.tokens_per_second, r.step_seconds,
      double(r.peak_memory_bytes) / (1024.0 * 1024.0));
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

std::vector<double> RankFigures::ToDoubles() const {
  return {attention_seconds, attention_cpu_seconds, comm_wait_seconds, double(bytes_sent),
          double(peak_memory_bytes), ring_wait_seconds, double(device_memory_peak_bytes)};
}

RankFigures RankFigures::FromDoubles(const std::vector<double>& v) {
  return {v.at(0), v.at(1), v.at(2), int64_t(v.at(3)), int64_t(v.at(4)), v.at(5), int64_t(v.at(6))};
}

std::string RankFiguresJson(const std::vector<RankFigures>& ranks) {
  std::vector<std::string> records;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankFigures& f = ranks[r];
    records.push_back(JsonRecord()
                          .Add("rank", int64_t(r))
                          .Add("attention_seconds", f.attention_seconds)
                          .Add("attention_cpu_seconds", f.attention_cpu_seconds)
                          .Add("comm_wait_seconds", f.comm_wait_seconds)
                          .Add("bytes_sent", f.bytes_sent)
                          .Add("peak_memory_bytes", f.peak_memory_bytes)
                          .Add("ring_wait_seconds", f.ring_wait_seconds)
                          .Add("device_memory_peak_bytes", f.device_memory_peak_bytes)
                          .str());
  }
  return absl::StrCat("[", absl::StrJoin(records, ", "), "]");
}

}  // namespace ringtrain
