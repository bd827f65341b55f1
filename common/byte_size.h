// Sizes as people write them: "80GiB", "5GB", "500 MB", "1.5TiB", "85899345920" (bytes) — binary
// units KiB … TiB, decimal KB … TB, B; case-insensitive. Torch-free: ringctl plan's
// --device-memory. (checkpoint.hf_max_shard_size follows transformers' own spelling rules:
// ParseShardSize, common/safetensors/index.h.)
#ifndef RINGTRAIN_COMMON_BYTE_SIZE_H_
#define RINGTRAIN_COMMON_BYTE_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

// A positive size below 2^63. INVALID_ARGUMENT naming the text and the forms that would work (the
// caller prefixes the flag or key).
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_BYTE_SIZE_H_
