// The rendezvous port ringtrain-run hands its ranks (MASTER_PORT) when none is given.
#ifndef RINGTRAIN_WORKER_LAUNCHER_LAUNCH_PORT_H_
#define RINGTRAIN_WORKER_LAUNCHER_LAUNCH_PORT_H_

#include <string>

#include "absl/status/statusor.h"

namespace ringtrain {

// A TCP port free on `addr` now (bound and closed again), not reserved: rank 0's TCPStore binds it
// a moment later, once LibTorch has loaded. Chosen at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range; 10000 up to its start), because any process's outgoing
// connection may take a free ephemeral port in that moment — then rank 0 finds it in use — while
// a port outside the range is taken only by an explicit bind. Falls back to a kernel-chosen port
// when none of the tries binds. Errors name --master-addr: INVALID_ARGUMENT when it does not
// resolve, UNAVAILABLE when nothing binds there.
absl::StatusOr<int> PickFreePort(const std::string& addr);

// The first port of the kernel's ephemeral range (32768 when it cannot be read).
int EphemeralPortsStart();

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_LAUNCHER_LAUNCH_PORT_H_
