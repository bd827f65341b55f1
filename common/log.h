// A small logger: one line per call to stderr, with a level letter and a UTC timestamp
// ("I 12:34:56.789 message"). Thread-safe: each line is written with a single write(2).
#ifndef RINGTRAIN_COMMON_LOG_H_
#define RINGTRAIN_COMMON_LOG_H_

#include <sstream>
#include <string>

namespace ringtrain {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Whether lines of `level` are written: RINGTRAIN_LOG_LEVEL=debug|info|warning|error (default
// info), read once.
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

#define RT_LOG(level)                                              \
  if (!::ringtrain::LogEnabled(::ringtrain::LogLevel::k##level)) { \
  } else                                                           \
    ::ringtrain::internal::LogMessage(::ringtrain::LogLevel::k##level).stream()

#endif  // RINGTRAIN_COMMON_LOG_H_
