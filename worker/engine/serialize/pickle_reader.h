// Private to serialize/: a strict interpreter for the data.pkl that torch.save (and LibTorch's
// Pickler) writes for a dict of tensors. It understands just the pickle opcodes and globals those
// writers emit for that shape of data and rejects everything else, so a file that holds arbitrary
// Python objects is refused with a message instead of half-loaded.
#ifndef RINGTRAIN_WORKER_ENGINE_SERIALIZE_PICKLE_READER_H_
#define RINGTRAIN_WORKER_ENGINE_SERIALIZE_PICKLE_READER_H_

#include <functional>
#include <string>

#include <c10/core/Storage.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/engine/serialize/state_dict_io.h"

namespace ringtrain {
namespace serialize_internal {

// The bytes of one storage record (`<archive>/data/<key>`), and a name for it in error messages.
struct StorageRecord {
  // nbytes() is the record's size. On the CPU, the bytes themselves; on the meta device, only
  // their size (UnpickleStateDictViews: the tensors' geometry without their data).
  c10::Storage bytes;
  std::string path;
};

// Fetches the record for persistent-id `key`. Called at most once per key. Its errors are returned
// unchanged (DATA_LOSS for a missing or unreadable record is what callers expect).
using StorageLoader = std::function<absl::StatusOr<StorageRecord>(const std::string& key)>;

// Interprets `pickle` as a dict (or OrderedDict) of name → tensor, in pickle order.
//   DATA_LOSS: malformed pickle (truncated, stack underflow, bad memo index), a storage record
//     shorter than its tensors need, or tensor geometry outside its storage.
//   INVALID_ARGUMENT: well-formed but unsupported content — an unknown opcode or global, a
//     top-level object that is not a dict, a non-string key or a non-tensor value.
//   RESOURCE_EXHAUSTED: out of memory, or views repeating elements (stride 0) whose copies would
//     add more than 1 GiB.
// Tensors come back contiguous, on CPU, each owning its memory (views of one storage are copied
// apart), with requires_grad false. Never throws for bad input.
absl::StatusOr<StateDict> UnpickleStateDict(absl::string_view pickle,
                                            const StorageLoader& load_storage);

// The same checks, but the tensors come back as the views of the loader's storages that the pickle
// makes (any storage offset and strides, several entries possibly sharing one storage), on the
// storages' device: with meta storages, each tensor's geometry and storage without any data.
absl::StatusOr<StateDict> UnpickleStateDictViews(absl::string_view pickle,
                                                 const StorageLoader& load_storage);

}  // namespace serialize_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_SERIALIZE_PICKLE_READER_H_
