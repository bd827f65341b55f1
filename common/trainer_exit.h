// How a rank ended, as its exit status says it: the contract between ringtrain-trainer (which
// exits with these), the agent (which adds its own for ranks it could not start) and the
// coordinator (which decides from them whether a failure is a cause or a symptom, and whether a
// restart could help). Torch-free.
#ifndef RINGTRAIN_COMMON_TRAINER_EXIT_H_
#define RINGTRAIN_COMMON_TRAINER_EXIT_H_

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace ringtrain {

inline constexpr int kTrainerExitOk = 0;
// The run failed (an error in this rank: out of memory, a diverged loss, a bug).
inline constexpr int kTrainerExitFailed = 1;
// The command line or the config was rejected before anything ran: a restart would repeat it.
inline constexpr int kTrainerExitRejected = 2;
// This rank lost contact with a peer (a collective failed or timed out): a symptom of another
// rank's failure, which the coordinator looks for before it blames this one.
inline constexpr int kTrainerExitPeerLost = 3;
// The agent's own: the assignment arrived while another rank ran here.
inline constexpr int kAgentExitBusy = 125;
// The agent's own: it refused the rank before starting a trainer (a path outside its roots, a job
// that reads data on an agent without --data-root, an assignment it cannot parse); the reason
// travels as the exit's stderr tail. The same agent would refuse it again.
inline constexpr int kAgentExitRefused = 126;
// The agent's own: the trainer could not be started (its folder cannot be made, exec failed).
inline constexpr int kAgentExitStartFailed = 127;

// A failure that is this rank losing contact with a peer (a failed or timed-out collective, a
// rendezvous that did not complete) carries this payload on its Status, so the trainer exits with
// kTrainerExitPeerLost rather than kTrainerExitFailed. (UNAVAILABLE alone would not tell: the
// checkpoint storage layer uses it too.)
inline constexpr char kPeerLostPayload[] = "ringtrain.dev/peer-lost";

inline absl::Status MarkPeerLost(absl::Status status) {
  status.SetPayload(kPeerLostPayload, absl::Cord("1"));
  return status;
}

inline bool IsPeerLost(const absl::Status& status) {
  return status.GetPayload(kPeerLostPayload).has_value();
}

// The exit status of a trainer whose run ended with `status` (after the config was accepted).
inline int TrainerExitCode(const absl::Status& status) {
  if (status.ok()) return kTrainerExitOk;
  return IsPeerLost(status) ? kTrainerExitPeerLost : kTrainerExitFailed;
}

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_TRAINER_EXIT_H_
