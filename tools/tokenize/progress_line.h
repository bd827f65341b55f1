// ringtrain-tokenize's progress on stderr: on a terminal one line redrawn in place (at most ten
// times a second), otherwise a line every ten seconds, so a log stays short.
//   [#########...........]  45.1%  12.3/27.3 MiB  file 2/3  1.21 M tokens/s
#ifndef RINGTRAIN_TOOLS_TOKENIZE_PROGRESS_LINE_H_
#define RINGTRAIN_TOOLS_TOKENIZE_PROGRESS_LINE_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace ringtrain {

class ProgressLine {
 public:
  // `total_bytes` of input over `total_files` files.
  ProgressLine(int64_t total_bytes, int64_t total_files);

  // Bytes and tokens done so far over every file, and the file (1-based) being read.
  void Update(int64_t bytes_done, int64_t tokens_done, int64_t file);
  // Ends a redrawn line (a terminal), so what follows starts on its own line.
  void Finish();

  // The line, for a given state (pure; tested).
  static std::string Format(int64_t bytes_done, int64_t total_bytes, int64_t file,
                            int64_t total_files, double tokens_per_second);

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_bytes_;
  int64_t total_files_;
  bool terminal_;
  Clock::time_point start_;
  Clock::time_point last_ = Clock::time_point::min();
  bool drawn_ = false;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_TOOLS_TOKENIZE_PROGRESS_LINE_H_
