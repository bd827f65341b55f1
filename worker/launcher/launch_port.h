// The rendezvous port ringtrain-run hands its ranks (MASTER_PORT) when none is given.
#ifndef RINGTRAIN_WORKER_LAUNCHER_LAUNCH_PORT_H_
#define RINGTRAIN_WORKER_LAUNCHER_LAUNCH_PORT_H_

#include <string>

#include "absl/status/statusor.h"

namespace ringtrain {

// Binds a TCP socket to port 0 on `addr`, reads back the port the kernel chose and closes it.
// The port is free now, not reserved: rank 0's TCPStore binds it a moment later. Errors name
// --master-addr: INVALID_ARGUMENT when it does not resolve, UNAVAILABLE when nothing binds there.
absl::StatusOr<int> PickFreePort(const std::string& addr);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_LAUNCHER_LAUNCH_PORT_H_
