// A torch.save file of weights (a dict of name → tensor) as a StateReader that reads only the bytes
// of the elements asked for: a rank loading its FSDP shards of a model's initial weights reads its
// own part of the file, not the whole of it.
//
// Opening reads the zip's directory and data.pkl (each tensor's dtype, shape, storage record and
// place in it), not the tensors. A read of a row-major run of a tensor reads exactly its bytes; a
// tensor that is a strided view of its storage (a transpose, a column slice saved as it was) is
// read through its whole storage record. A read that covers a whole record is checked against the
// zip's CRC-32 as ReadStateDict checks every record; a partial read cannot be (the CRC covers the
// record), so it relies on the sizes and geometry checked at opening. An archive whose records are
// compressed (not written by torch.save) is read whole with ReadStateDict.
#ifndef RINGTRAIN_WORKER_ENGINE_SERIALIZE_TORCH_SAVE_READER_H_
#define RINGTRAIN_WORKER_ENGINE_SERIALIZE_TORCH_SAVE_READER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/serialize/state_reader.h"

namespace ringtrain {

// The errors of ReadStateDict for what opening reads (NOT_FOUND, DATA_LOSS naming the file for a
// truncated or corrupt archive or a storage record shorter than its tensors, INVALID_ARGUMENT for
// content that is not a dict of tensors or the legacy format); Read's are DATA_LOSS naming the
// file.
absl::StatusOr<std::unique_ptr<StateReader>> OpenTorchSaveReader(const std::string& path);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_SERIALIZE_TORCH_SAVE_READER_H_
