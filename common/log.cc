#include "common/log.h"

#include <unistd.h>

#include <strings.h>
#include <chrono>
#include <cstdlib>
#include <ctime>

namespace ringtrain {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("RINGTRAIN_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (strcasecmp(env, "debug") == 0) return LogLevel::kDebug;
  if (strcasecmp(env, "warning") == 0) return LogLevel::kWarning;
  if (strcasecmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

LogLevel Level() {
  static const LogLevel level = LevelFromEnv();
  return level;
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarning: return "W";
    case LogLevel::kError: return "E";
  }
  return "?";
}

}  // namespace

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= static_cast<int>(Level()); }

void LogLine(LogLevel level, const std::string& message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
  char millis_text[8];
  std::snprintf(millis_text, sizeof(millis_text), ".%03d", millis);
  std::string line =
      std::string(LevelName(level)) + " " + stamp + millis_text + " " + message + "\n";
  // One write per line so that lines from several threads never interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace ringtrain
