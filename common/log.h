// A small logger: one line per call to stderr, with a level, a UTC timestamp and an optional prefix
// (the rank, set once by the trainer). Thread-safe: each line is written with a single write(2).
#ifndef RINGTRAIN_COMMON_LOG_H_
#define RINGTRAIN_COMMON_LOG_H_

#include <sstream>
#include <string>

namespace ringtrain {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Lines below `level` are dropped. Default kInfo; RINGTRAIN_LOG_LEVEL=debug|info|warning|error.
void SetLogLevel(LogLevel level);
// Text put before every line, e.g. "[rank 3] ". Set it before starting threads.
void SetLogPrefix(std::string prefix);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, const std::string& message);

namespace internal {
class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage() { LogLine(level_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal

}  // namespace ringtrain

#define RT_LOG(level)                                                      \
  if (!::ringtrain::LogEnabled(::ringtrain::LogLevel::k##level)) {         \
  } else                                                                   \
    ::ringtrain::internal::LogMessage(::ringtrain::LogLevel::k##level).stream()

#endif  // RINGTRAIN_COMMON_LOG_H_
