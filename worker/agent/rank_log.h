// A rank's log, <rank dir>/rank.log: what its trainer printed on stdout and stderr, and the
// agent's own notes (the trainer started, how it ended), one record per line:
//
//   2026-12-02T11:25:56.123456Z stderr I 11:25:56.123 step 1/100 loss 5.5431 ...
//
// (UTC time the agent read the line, to the microsecond; the stream; one space; the text). A
// trainer line longer than kMaxRankLogText is cut into several records; a line the trainer ends
// without a newline is written when its stream closes. Runs of the rank on the same worker append
// to the same file. The writer is the RankSupervisor; the reader is the agent's LogServer
// (log_server.h), for `ringctl logs`. No gRPC, no LibTorch.
#ifndef RINGTRAIN_WORKER_AGENT_RANK_LOG_H_
#define RINGTRAIN_WORKER_AGENT_RANK_LOG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ringtrain {

inline constexpr char kRankLogFileName[] = "rank.log";
// Text bytes per record; longer trainer lines continue in the next record.
inline constexpr size_t kMaxRankLogText = 16 * 1024;

// "2026-12-02T11:25:56.123456Z stderr text\n".
std::string FormatRankLogLine(absl::Time time, absl::string_view stream, absl::string_view text);

struct RankLogLine {
  int64_t time_unix_micros = 0;  // 0 when the line is not a record (then stream is "")
  std::string stream;
  std::string text;
  int64_t offset = 0;  // of the line's first byte in the file
};

// One line of the file, without its '\n'. A line that is not a record (a file from before
// timestamps) comes back whole as the text, with time 0 and stream "".
RankLogLine ParseRankLogLine(absl::string_view line);

struct RankLogRead {
  std::vector<RankLogLine> lines;  // whole lines only
  int64_t next_offset = 0;         // after the last line returned
  bool at_end = false;             // next_offset was the file's size when read
};

// Reads whole lines from byte `offset` of `path`, about `max_bytes` of them (at least one line,
// however long). NOT_FOUND when the file does not exist; INVALID_ARGUMENT for an offset past
// the end or negative.
absl::StatusOr<RankLogRead> ReadRankLog(const std::string& path, int64_t offset, size_t max_bytes);

// The offset where the last `lines` lines of `path` start (0 when it has fewer; the file's size
// for lines = 0). NOT_FOUND when the file does not exist.
absl::StatusOr<int64_t> RankLogTailOffset(const std::string& path, int64_t lines);

// Appends records to an open rank.log. Thread-safe: every record is one write(2) under a lock, so
// lines of stdout and stderr never interleave inside a record.
class RankLogWriter {
 public:
  // `fd` is opened O_APPEND and stays owned by the caller, open while the writer is used.
  explicit RankLogWriter(int fd) : fd_(fd) {}
  // Writes `text` (no newline inside) as one or more records of `stream`, stamped now.
  void Write(absl::string_view stream, absl::string_view text);

 private:
  const int fd_;
  absl::Mutex mu_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_RANK_LOG_H_
