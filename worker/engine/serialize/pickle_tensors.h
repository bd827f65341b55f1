// Private to serialize/: the tensor side of the strict unpickler (pickle_reader.h) — reading a
// storage's record, rebuilding a tensor as a view of it, and turning the final dict into a state
// dict of tensors that own their memory. Every size, stride and offset is checked against the
// bytes actually read before LibTorch sees it.
#ifndef RINGTRAIN_WORKER_ENGINE_SERIALIZE_PICKLE_TENSORS_H_
#define RINGTRAIN_WORKER_ENGINE_SERIALIZE_PICKLE_TENSORS_H_

#include <string>
#include <vector>

#include <ATen/Tensor.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/serialize/pickle_reader.h"
#include "worker/engine/serialize/pickle_value.h"
#include "worker/engine/serialize/state_dict_io.h"

namespace ringtrain {
namespace serialize_internal {

// Fills `storage` (a kStorage whose dtype and number — the element count — are set) for persistent
// key `key`: its tensor becomes 1-D over the record's bytes and its text the record's path. An
// empty storage reads no record (text stays `key`). DATA_LOSS when the record is shorter than the
// storage needs; the loader's own errors come back unchanged.
absl::Status LoadStorage(const std::string& key, const StorageLoader& load, const OpErrors& errors,
                         Value* storage);

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks
// [, metadata]): the tensor, a view of the storage's tensor (or a fresh empty one when a size is
// 0). DATA_LOSS when the view would reach past the storage.
absl::StatusOr<at::Tensor> RebuildTensorV2(const std::vector<ValuePtr>& args,
                                           const OpErrors& errors);

// The entries a top-level dict of str → tensor holds, in its order, each tensor as the pickle made
// it (a view of its storage). INVALID_ARGUMENT for anything else.
absl::StatusOr<StateDict> DictEntries(const Value& top);

// Makes each tensor of `dict` contiguous and the sole owner of its memory (views of one storage
// copied apart). RESOURCE_EXHAUSTED when copying views apart would need too much memory.
absl::Status MaterializeStateDict(StateDict& dict);

}  // namespace serialize_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_SERIALIZE_PICKLE_TENSORS_H_
