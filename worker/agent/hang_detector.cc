#include "worker/agent/hang_detector.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace ringtrain {
namespace {

constexpr size_t kMaxProgressBytes = 4096;  // a beat is under 100 bytes

double Seconds(HangDetector::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

std::optional<ProgressBeat> ParseProgressBeat(absl::string_view text) {
  const nlohmann::json j =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;  // also a discarded (unparseable) value
  const auto beat = j.find("beat");
  const auto phase = j.find("phase");
  const auto phase_seconds = j.find("phase_seconds");
  const auto step = j.find("step");
  if (beat == j.end() || !beat->is_number_integer() || phase == j.end() || !phase->is_string() ||
      phase_seconds == j.end() || !phase_seconds->is_number() || step == j.end() ||
      !step->is_number_integer()) {
    return std::nullopt;
  }
  ProgressBeat out;
  out.beat = beat->get<int64_t>();
  const std::string& name = phase->get_ref<const std::string&>();
  out.phase = name == "compute" ? ProgressBeat::Phase::kCompute
              : name == "wait"  ? ProgressBeat::Phase::kWait
              : name == "io"    ? ProgressBeat::Phase::kIo
                                : ProgressBeat::Phase::kOther;
  out.phase_seconds = phase_seconds->get<double>();
  out.step = step->get<int64_t>();
  return out;
}

std::optional<ProgressBeat> ReadProgressBeat(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[kMaxProgressBytes];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) < 0 && errno == EINTR) {
  }
  close(fd);
  if (n <= 0) return std::nullopt;
  return ParseProgressBeat(absl::string_view(buf, static_cast<size_t>(n)));
}

HangDetector::HangDetector(HangLimits limits, Clock::time_point started)
    : limits_(limits), started_(started), last_change_(started) {}

std::optional<std::string> HangDetector::Observe(const std::optional<ProgressBeat>& read,
                                                 Clock::time_point now) {
  if (reported_ || !limits_.enabled()) return std::nullopt;
  std::optional<std::string> reason;
  if (read && (!last_ || read->beat != last_->beat)) {
    last_ = read;
    last_change_ = now;
    // (b) on a fresh beat only: a stale one says nothing about the training thread now.
    if (limits_.stall_limit.count() > 0 && read->phase == ProgressBeat::Phase::kCompute &&
        read->phase_seconds >= Seconds(limits_.stall_limit)) {
      reason = absl::StrFormat(
          "computing for %.1f s without reaching a collective or a step boundary (deadlock?; "
          "last step %d)",
          read->phase_seconds, read->step);
    }
  }
  if (!reason && limits_.silence_limit.count() > 0) {
    if (!last_ && now - started_ >= limits_.startup_grace + limits_.silence_limit) {
      reason = absl::StrFormat(
          "no heartbeat from the trainer for %.1f s since it started (process stopped or frozen "
          "before its first beat, or a trainer that does not write RINGTRAIN_PROGRESS_FILE)",
          Seconds(now - started_));
    } else if (last_ && now - last_change_ >= limits_.silence_limit) {
      reason = absl::StrFormat(
          "no heartbeat from the trainer for %.1f s (process stopped or frozen; last step %d)",
          Seconds(now - last_change_), last_->step);
    }
  }
  reported_ = reason.has_value();
  return reason;
}

}  // namespace ringtrain
