// Ids back to bytes: the table from each id to the bytes it stands for, built once when a tokenizer
// is loaded (Tokenizer::Decode uses it). Torch-free.
#ifndef RINGTRAIN_COMMON_TOKENIZER_TOKEN_DECODER_H_
#define RINGTRAIN_COMMON_TOKENIZER_TOKEN_DECODER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace ringtrain {

// Immutable once built: safe to share between threads.
class TokenDecoder {
 public:
  // `tokens`: (id, bytes) pairs, ids >= 0; where an id comes twice the later pair wins (added
  // tokens come after the vocabulary, as Hugging Face looks an id up among them first). Ids that no
  // pair names, below the largest, have no token.
  explicit TokenDecoder(const std::vector<std::pair<int32_t, std::string>>& tokens);

  // The bytes of `ids`, concatenated. INVALID_ARGUMENT naming the first id without a token, its
  // place in `ids`, and the range of ids there are.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;

 private:
  // By id. A map, not a table indexed by id: a file may name ids far apart (or one huge id), and
  // memory follows the tokens there are, not the largest id.
  absl::flat_hash_map<int32_t, std::string> bytes_;
  int64_t end_ = 0;  // the largest id + 1
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_TOKENIZER_TOKEN_DECODER_H_
