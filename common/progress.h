// What the training thread is doing, and a heartbeat that tells the trainer's agent so: the
// trainer's side of hang detection (the agent's side is worker/agent/rank_supervisor.h).
//
// The training thread marks its phase — kWait while it is blocked on its peers (a collective, a
// ring transfer, the rendezvous), kIo while it reads or writes checkpoints and data, kCompute
// otherwise — and each completed step. A heartbeat thread (StartHeartbeatFile) rewrites one file
// every period, atomically (a temporary file renamed over it), with one line of JSON:
//   {"beat":N,"phase":"compute"|"wait"|"io","phase_seconds":S,"step":K}
// beat counts the writes, phase_seconds is how long the current phase has lasted (restarted at
// every phase change and every step), step is the last completed step. The agent reads it: beats
// that stop mean the process is stopped or frozen; phase "compute" for longer than the collective
// timeout means the training thread is stuck without reaching its peers (its peers are then
// waiting in "wait", which is what tells them apart). Torch-free; the state is a few atomics.
#ifndef RINGTRAIN_COMMON_PROGRESS_H_
#define RINGTRAIN_COMMON_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace ringtrain::progress {

enum class Phase { kCompute = 0, kWait = 1, kIo = 2 };

const char* PhaseName(Phase phase);  // "compute", "wait", "io"

// Thread-safe; meant for the one training thread.
void SetPhase(Phase phase);
Phase CurrentPhase();
// Step `step` is complete: the phase clock starts again.
void StepDone(int64_t step);

// Sets `phase` for its lifetime, then restores the phase before it (a wait inside a checkpoint
// read stays a wait, and the read goes on as io afterwards).
class ScopedPhase {
 public:
  explicit ScopedPhase(Phase phase) : previous_(CurrentPhase()) { SetPhase(phase); }
  ~ScopedPhase() { SetPhase(previous_); }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  const Phase previous_;
};

// The line the heartbeat writes for `beat` now (exposed for tests).
std::string HeartbeatLine(int64_t beat);

// Starts the heartbeat thread writing `path` every `period` (the first write at once); it stops,
// and is joined, when the process exits normally. A failed write is retried at the next beat. No-op
// when `path` is empty or a heartbeat already runs.
void StartHeartbeatFile(const std::string& path,
                        std::chrono::milliseconds period = std::chrono::milliseconds(1000));

}  // namespace ringtrain::progress

#endif  // RINGTRAIN_COMMON_PROGRESS_H_
