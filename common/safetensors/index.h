// model.safetensors.index.json: which shard file holds each tensor of a sharded Hugging Face
// checkpoint, and how a writer splits tensors into shards, as transformers' save_pretrained does.
#ifndef RINGTRAIN_COMMON_SAFETENSORS_INDEX_H_
#define RINGTRAIN_COMMON_SAFETENSORS_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

inline constexpr absl::string_view kSafetensorsIndexFileName = "model.safetensors.index.json";
inline constexpr absl::string_view kSafetensorsFileName = "model.safetensors";  // one shard

struct SafetensorsIndex {
  uint64_t total_size = 0;  // metadata.total_size: the tensors' bytes; 0 when the file has none
  std::map<std::string, std::string> weight_map;  // tensor name → shard file name in the folder

  // DATA_LOSS naming `source` when `text` is not JSON, not an object, has no "weight_map" or one
  // that is not a string → string map, a metadata.total_size that is not a non-negative integer,
  // or a shard name that is not a plain file name of the folder ("", ".", "..", or with a '/').
  // Other metadata keys (transformers 5's total_parameters) are ignored.
  static absl::StatusOr<SafetensorsIndex> Parse(absl::string_view text, const std::string& source);

  // {"metadata": {"total_size": N}, "weight_map": {...}}: sorted keys, indent 2, a final newline,
  // non-ASCII escaped, as transformers writes it (json.dumps(index, indent=2, sort_keys=True)).
  std::string ToJson() const;
};

// Splits tensors of the given byte sizes into shards of at most `max_shard_bytes`, as
// huggingface_hub's split_state_dict_into_shards_factory (save_pretrained's splitter) does: in
// order, a new shard when the next tensor would take the current one over the cap, and a tensor
// larger than the cap alone in a shard of its own, placed where it is met (the current shard goes
// on after it). Each shard lists tensor indices in their order; no shard is empty; no tensors give
// no shards.
std::vector<std::vector<size_t>> PlanShards(const std::vector<uint64_t>& tensor_bytes,
                                            uint64_t max_shard_bytes);

// "model-00001-of-00003.safetensors" for i = 0, n = 3 (transformers' naming, i counted from 0).
std::string ShardFileName(size_t i, size_t n);

// transformers' max_shard_size spellings (convert_file_size_to_int): an integer (bytes), or one
// followed by KB / MB / GB (10^3, 10^6, 10^9; a lower-case final "b" means bits, an eighth) or
// KiB / MiB / GiB (2^10, 2^20, 2^30), the unit in any case. INVALID_ARGUMENT naming the text and
// these forms otherwise, for 0, and on overflow.
absl::StatusOr<uint64_t> ParseShardSize(absl::string_view text);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_SAFETENSORS_INDEX_H_
