// Reading and writing state dicts (name → tensor) in PyTorch's torch.save zip format, so that
// Python's torch.load reads what we write and we read what torch.save wrote (a dict or an
// OrderedDict of tensors, float32/bfloat16/float16/float64/int64/int32 …, views included).
// LibTorch's own pickle_load rejects OrderedDict and SETITEM, hence this small reader.
#ifndef RINGTRAIN_WORKER_ENGINE_SERIALIZE_STATE_DICT_IO_H_
#define RINGTRAIN_WORKER_ENGINE_SERIALIZE_STATE_DICT_IO_H_

#include <string>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

#include "absl/status/statusor.h"

namespace ringtrain {

using StateDict = std::vector<std::pair<std::string, at::Tensor>>;  // in file order

// Reads a torch.save'd dict of tensors. NOT_FOUND for a missing file; DATA_LOSS for a truncated or
// corrupt file (each record read is checked against the zip's CRC-32, which LibTorch skips);
// INVALID_ARGUMENT when the pickle holds something other than a dict of tensors (naming what was
// found) or the file is in the legacy non-zip format; RESOURCE_EXHAUSTED when a tensor does not fit
// in memory, or when copying views that repeat elements (stride 0) would add more than 1 GiB.
// Tensors come back contiguous, on CPU, in their stored dtype, with requires_grad false, each
// owning its memory (views of one storage are copied apart).
absl::StatusOr<StateDict> ReadStateDict(const std::string& path);

// Writes `dict` so that torch.load(path) returns a dict name → tensor. Writes to a temporary file
// in the same folder, fsyncs, then renames: a crash never leaves a partial file at `path`. Tensors
// may live on any device and be views; the file holds detached, contiguous CPU copies.
// INVALID_ARGUMENT for an undefined, sparse or quantized tensor or a repeated name; UNAVAILABLE
// when the OS refuses a step (the message names the file and the errno text); INTERNAL when
// LibTorch's pickler or zip writer fails. On any error the temporary file is removed and `path` is
// untouched.
absl::Status WriteStateDict(const std::string& path, const StateDict& dict);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_SERIALIZE_STATE_DICT_IO_H_
