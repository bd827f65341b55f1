#include "coordinator/clock.h"

#include "absl/time/clock.h"

namespace ringtrain {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

}  // namespace

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock;  // never destroyed: threads may read it at exit
  return clock;
}

absl::Time ManualClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void ManualClock::Advance(absl::Duration by) {
  absl::MutexLock lock(&mu_);
  if (by > absl::ZeroDuration()) now_ += by;
}

}  // namespace ringtrain
