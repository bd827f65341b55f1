#include "tools/tokenize/progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace ringtrain {

ProgressLine::ProgressLine(int64_t total_bytes, int64_t total_files)
    : total_bytes_(total_bytes),
      total_files_(total_files),
      terminal_(isatty(STDERR_FILENO) == 1),
      start_(Clock::now()) {}

std::string ProgressLine::Format(int64_t bytes_done, int64_t total_bytes, int64_t file,
                                 int64_t total_files, double tokens_per_second) {
  constexpr int kWidth = 20;
  const double fraction =
      total_bytes > 0 ? std::clamp(double(bytes_done) / double(total_bytes), 0.0, 1.0) : 1.0;
  const int filled = static_cast<int>(fraction * kWidth);
  constexpr double kMiB = 1024.0 * 1024.0;
  return absl::StrFormat("[%s%s] %5.1f%%  %.1f/%.1f MiB  file %d/%d  %.2f M tokens/s",
                         std::string(filled, '#'), std::string(kWidth - filled, '.'),
                         100.0 * fraction, bytes_done / kMiB, total_bytes / kMiB, file, total_files,
                         tokens_per_second / 1e6);
}

void ProgressLine::Update(int64_t bytes_done, int64_t tokens_done, int64_t file) {
  const Clock::time_point now = Clock::now();
  const auto every = terminal_ ? std::chrono::milliseconds(100) : std::chrono::seconds(10);
  if (last_ != Clock::time_point::min() && now - last_ < every) return;
  if (last_ == Clock::time_point::min() && !terminal_) {  // the first line of a log waits too
    last_ = now;
    return;
  }
  last_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const std::string line =
      Format(bytes_done, total_bytes_, file, total_files_, seconds > 0 ? tokens_done / seconds : 0);
  std::fprintf(stderr, terminal_ ? "\r%s\033[K" : "%s\n", line.c_str());
  drawn_ = terminal_;
}

void ProgressLine::Finish() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace ringtrain
