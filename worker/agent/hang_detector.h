// Whether a running trainer hangs, judged from the progress file it rewrites about every second
// (RINGTRAIN_PROGRESS_FILE, set by RankSupervisor). The trainer's side of the contract: a dedicated
// thread writes `<path>.tmp` and renames it over `<path>` with one line of JSON,
//   {"beat":N,"phase":"compute"|"wait"|"io","phase_seconds":S,"step":K}
// where `beat` grows by one each write, `phase` is what the training thread does (`wait`: blocked
// in a collective or the rendezvous, waiting for peers; `io`: reading or writing checkpoints or
// data; `compute`: anything else), `phase_seconds` how long it has been in that phase (reset when
// the phase changes or a step ends), `step` the last completed step (0 before the first).
//
// Two verdicts, each off when its limit is 0:
//   (a) silence — `beat` has not changed for `silence_limit` (before the first beat:
//       `startup_grace + silence_limit` since the start). The beating thread is not running: the
//       process is stopped (SIGSTOP), frozen or swapped out. A trainer that never writes the file
//       (an older trainer, a script) is judged by this rule alone, so the agent turns it on only
//       for trainers it knows beat.
//   (b) stall — a fresh beat says `compute` with `phase_seconds >= stall_limit`: the beats keep
//       coming but the training thread has not reached a collective or a step boundary (a
//       deadlock, a livelock). `wait` is never a stall: waiting for peers is what the survivors of
//       a hung or dead rank do, and the rank that hangs is the one to report. `io` is never one
//       either (a large checkpoint may take long).
// The beat is written about every second, so `silence_limit` should be several seconds (10 s or
// more), and `stall_limit` longer than the slowest step's compute.
//
// Torch-, gRPC- and thread-free: the caller (RankSupervisor's monitor thread) feeds it reads.
#ifndef RINGTRAIN_WORKER_AGENT_HANG_DETECTOR_H_
#define RINGTRAIN_WORKER_AGENT_HANG_DETECTOR_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ringtrain {

// One write of the progress file.
struct ProgressBeat {
  enum class Phase { kCompute, kWait, kIo, kOther };  // kOther: a phase this agent does not know
  int64_t beat = 0;
  Phase phase = Phase::kOther;
  double phase_seconds = 0;
  int64_t step = 0;
};

// The beat in `text` (one JSON object, whitespace around it allowed), or nullopt when `text` is
// not one: a torn or empty read, a field missing or of the wrong type. Never throws.
std::optional<ProgressBeat> ParseProgressBeat(absl::string_view text);

// Reads the file at `path` (its first 4 KiB) and parses it; nullopt when it is missing, cannot be
// read or does not parse. One open, one read, one close: cheap enough for every 100 ms.
std::optional<ProgressBeat> ReadProgressBeat(const std::string& path);

// The thresholds of the two verdicts (see above). Zero turns a verdict off; both zero turn hang
// detection off (the progress file is then not even read).
struct HangLimits {
  std::chrono::milliseconds silence_limit{0};      // (a): no new beat for this long
  std::chrono::milliseconds stall_limit{0};        // (b): `compute` for this long
  std::chrono::milliseconds startup_grace{60000};  // (a): added before the first beat

  bool enabled() const { return silence_limit.count() > 0 || stall_limit.count() > 0; }
};

// Not thread-safe: one caller feeds it, in time order.
class HangDetector {
 public:
  using Clock = std::chrono::steady_clock;

  // `started`: when the trainer was started (the first beat is due startup_grace + silence_limit
  // after it).
  HangDetector(HangLimits limits, Clock::time_point started);

  // Feeds what the progress file held at `now` (nullopt: missing or unreadable, which tells
  // nothing). Returns the reason, a sentence naming the kind of hang, how long and the last step,
  // the first time the trainer counts as hung; nullopt otherwise, and always once it has returned
  // a reason.
  std::optional<std::string> Observe(const std::optional<ProgressBeat>& read,
                                     Clock::time_point now);

 private:
  const HangLimits limits_;
  const Clock::time_point started_;
  std::optional<ProgressBeat> last_;  // the last beat seen
  Clock::time_point last_change_;     // when `last_` was first seen
  bool reported_ = false;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_AGENT_HANG_DETECTOR_H_
