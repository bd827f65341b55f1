#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <strings.h>

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

std::atomic<int>& Level() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

std::string& Prefix() {
  static std::string prefix;
  return prefix;
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

void SetLogLevel(LogLevel level) { Level().store(static_cast<int>(level)); }
void SetLogPrefix(std::string prefix) { Prefix() = std::move(prefix); }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= Level().load(); }

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
  std::string line = Prefix() + LevelName(level) + " " + stamp + millis_text + " " + message + "\n";
  // One write per line so that lines from several threads never interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace ringtrain
