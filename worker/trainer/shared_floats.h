// POSIX shared memory as float32 host tensors, for in-memory snapshots whose buddy runs on the same
// host (memory_snapshots.h): the owner writes a snapshot once into a segment its buddy has mapped,
// in place of sending it through the loopback (three copies of the state: its own, Gloo's send,
// Gloo's receive). A mapping outlives its owner's process, so the buddy's copy survives the owner
// being killed, as a received copy does; the names are unlinked once both sides have mapped them,
// so a killed process leaves nothing behind in /dev/shm.
#ifndef RINGTRAIN_WORKER_TRAINER_SHARED_FLOATS_H_
#define RINGTRAIN_WORKER_TRAINER_SHARED_FLOATS_H_

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ringtrain {

// "/ringtrain-snapshot-<pid>-<nonce>-<slot>": the owner's pid and a nonce it chose.
std::string SharedFloatsName(int64_t owner_pid, int64_t nonce, int64_t slot);

// A new segment `name` of `elements` floats, its memory reserved up front (posix_fallocate: a full
// /dev/shm is an error here, not a SIGBUS at the first copy) and mapped read-write with its pages
// populated. Fails if the name exists. The tensor unmaps it when its last reference goes.
absl::StatusOr<at::Tensor> CreateSharedFloats(const std::string& name, int64_t elements);

// The existing segment `name`, which must hold exactly `elements` floats, mapped read-only (the
// buddy's side: it reads a copy only to heal).
absl::StatusOr<at::Tensor> OpenSharedFloats(const std::string& name, int64_t elements);

// Removes the name (the mappings stay); no error when it is already gone.
void UnlinkSharedFloats(const std::string& name);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_SHARED_FLOATS_H_
