// `ringctl loss-compare`'s local mode: one side run by ringtrain-run on this machine, its output
// into side->log_path and its metrics into side->jsonl_path.
#ifndef RINGTRAIN_CLIENT_LOSS_COMPARE_LOCAL_H_
#define RINGTRAIN_CLIENT_LOSS_COMPARE_LOCAL_H_

#include <string>

#include "absl/status/statusor.h"
#include "client/jsonl.h"
#include "client/loss_compare.h"

namespace ringtrain {

// ringtrain-run beside this executable (or "ringtrain-run" when /proc/self/exe cannot be read).
std::string DefaultRunPath();

// Runs side->argv (BuildRunArgs) and reads its losses (ReadSideLosses). Sets exit_code and seconds;
// on a terminal shows the last step once a second. ABORTED naming the side, its exit status and log
// when the run fails; the launcher's error when it cannot start.
absl::StatusOr<StepLosses> RunSideLocally(LossCompareSide* side, int steps);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_LOSS_COMPARE_LOCAL_H_
