// The agent's reconnect delays: exponential backoff with +-20% jitter, capped. Header-only.
#ifndef RINGTRAIN_WORKER_AGENT_BACKOFF_H_
#define RINGTRAIN_WORKER_AGENT_BACKOFF_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

namespace ringtrain {

// Delays of `initial`, then doubled after each Next() up to `max`, each +-20% jitter and never
// above `max`; Reset() starts again from `initial`. Not thread-safe (one loop owns it).
class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max)
      : initial_(initial), max_(max), next_(initial) {}
  std::chrono::milliseconds Next() {
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    const auto delay = std::chrono::milliseconds(
        static_cast<int64_t>(static_cast<double>(next_.count()) * jitter(rng_)));
    next_ = std::min(next_ * 2, max_);
    return std::min(delay, max_);
  }
  void Reset() { next_ = initial_; }

 private:
  const std::chrono::milliseconds initial_;
  const std::chrono::milliseconds max_;
  std::chrono::milliseconds next_;
  std::mt19937 rng_{std::random_device{}()};
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_BACKOFF_H_
