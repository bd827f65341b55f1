// Where the coordinator's state reads the time: heartbeats and worker timeouts, the adoption
// deadline after a restart, the times the job store records. The coordinator runs on the real
// clock; tests hand in a ManualClock and move it forward instead of sleeping, so a timeout is
// crossed exactly when the test says, however slow the machine.
#ifndef RINGTRAIN_COORDINATOR_CLOCK_H_
#define RINGTRAIN_COORDINATOR_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ringtrain {

// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;

  // The system clock (absl::Now()). Lives for the whole process.
  static Clock* Real();
};

// A clock that moves only when told. Thread-safe.
class ManualClock : public Clock {
 public:
  // Starts at `start`; the default is a fixed instant, so tests that record times repeat exactly.
  explicit ManualClock(absl::Time start = absl::FromUnixSeconds(1700000000)) : now_(start) {}

  absl::Time Now() override;
  void Advance(absl::Duration by);  // a negative `by` is ignored: time never runs backwards

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_CLOCK_H_
