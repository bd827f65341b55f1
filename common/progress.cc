#include "common/progress.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/str_format.h"

namespace ringtrain::progress {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_phase{static_cast<int>(Phase::kCompute)};
std::atomic<int64_t> g_phase_start_ns{Clock::now().time_since_epoch().count()};
std::atomic<int64_t> g_step{0};

void RestartPhaseClock() {
  g_phase_start_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

// Writes `text` to `path` through a temporary file in the same folder, renamed over it.
bool WriteAtomically(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return written && std::rename(temp.c_str(), path.c_str()) == 0;
}

// The heartbeat thread; joined by its destructor when the process exits normally.
class Heartbeat {
 public:
  Heartbeat(std::string path, std::chrono::milliseconds period)
      : path_(std::move(path)), period_(period), thread_([this] { Loop(); }) {}
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (int64_t beat = 1; !stop_; ++beat) {
      WriteAtomically(path_, HeartbeatLine(beat));
      wake_.wait_for(lock, period_, [this] { return stop_; });
    }
  }

  const std::string path_;
  const std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is built
};

std::mutex g_heartbeat_mu;
std::unique_ptr<Heartbeat> g_heartbeat;  // destroyed (joined) at normal exit

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kWait: return "wait";
    case Phase::kIo: return "io";
    case Phase::kCompute: break;
  }
  return "compute";
}

void SetPhase(Phase phase) {
  if (g_phase.exchange(static_cast<int>(phase), std::memory_order_relaxed) !=
      static_cast<int>(phase)) {
    RestartPhaseClock();
  }
}

Phase CurrentPhase() { return static_cast<Phase>(g_phase.load(std::memory_order_relaxed)); }

void StepDone(int64_t step) {
  g_step.store(step, std::memory_order_relaxed);
  RestartPhaseClock();
}

std::string HeartbeatLine(int64_t beat) {
  const int64_t start = g_phase_start_ns.load(std::memory_order_relaxed);
  const double phase_seconds =
      std::chrono::duration<double>(Clock::now().time_since_epoch() - Clock::duration(start))
          .count();
  return absl::StrFormat("{\"beat\":%d,\"phase\":\"%s\",\"phase_seconds\":%.3f,\"step\":%d}\n",
                         beat, PhaseName(CurrentPhase()), phase_seconds,
                         g_step.load(std::memory_order_relaxed));
}

void StartHeartbeatFile(const std::string& path, std::chrono::milliseconds period) {
  if (path.empty()) return;
  std::lock_guard<std::mutex> lock(g_heartbeat_mu);
  if (g_heartbeat == nullptr) g_heartbeat = std::make_unique<Heartbeat>(path, period);
}

}  // namespace ringtrain::progress
