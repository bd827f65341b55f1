// Shared memory as float32 host tensors, for in-memory snapshots whose buddy runs on the same host
// (memory_snapshots.h): the owner writes a snapshot once into memory its buddy has mapped, in
// place of sending it through the loopback (three copies of the state: its own, Gloo's send,
// Gloo's receive). The memory is a memfd, which the buddy opens through /proc/<owner pid>/fd/<fd>:
// it has no name, so nothing is ever left behind in /dev/shm, and a mapping outlives its owner's
// process, so the buddy's copy survives the owner being killed, as a received copy does.
#ifndef RINGTRAIN_WORKER_TRAINER_SHARED_FLOATS_H_
#define RINGTRAIN_WORKER_TRAINER_SHARED_FLOATS_H_

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ringtrain {

struct SharedFloats {
  at::Tensor floats;  // mapped read-write; unmapped, and its memfd closed, with its last reference
  int fd = -1;        // the memfd, open while `floats` lives
};

// Where another process of this host opens process `pid`'s memfd `fd`: /proc/<pid>/fd/<fd>.
std::string SharedFloatsPath(int64_t pid, int64_t fd);

// New shared memory of `elements` floats, reserved up front (posix_fallocate: no room is an error
// here, not a SIGBUS at the first copy) and mapped; with `populate`, its pages mapped in now
// (MAP_POPULATE) rather than faulted in by the first copy into it — on this project's VMs about
// 2 s per GB either way.
absl::StatusOr<SharedFloats> CreateSharedFloats(int64_t elements, bool populate = true);

// The shared memory at `path` (SharedFloatsPath of another process's memfd), which must hold
// exactly `elements` floats, mapped read-only: the buddy reads a copy only to heal.
absl::StatusOr<at::Tensor> OpenSharedFloats(const std::string& path, int64_t elements);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_SHARED_FLOATS_H_
