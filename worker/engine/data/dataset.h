// Token datasets: a finite array of token ids, read by window. Torch-free.
//
//   synthetic  a seeded first-order Markov source over the vocabulary whose entropy rate is known
//   text       UTF-8 files (or a folder of them, read in sorted path order), one token per byte, or
//              with a tokenizer (common/tokenizer/tokenizer.h) each file's BPE ids, concatenated
//   bin        a raw little-endian uint16 (or uint32) token array, nanoGPT's .bin layout
#ifndef RINGTRAIN_WORKER_ENGINE_DATA_DATASET_H_
#define RINGTRAIN_WORKER_ENGINE_DATA_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/choices.h"

namespace ringtrain {

struct DatasetSpec {
  DatasetKind kind = DatasetKind::kSynthetic;
  std::string path;  // file or folder (text), file (bin); unused for synthetic
  TokenDtype token_dtype = TokenDtype::kUint16;  // bin only
  std::string tokenizer_path;                    // text only: empty = one token per byte
  // text with a tokenizer: appended after each file (the document end); -1 = the tokenizer's
  // end-of-text token, or none when it has none.
  int64_t eos_id = -1;
  int64_t vocab_size = 0;      // every token must be < vocab_size
  uint64_t seed = 0;           // synthetic only: the source (transitions and samples)
  uint64_t sample_stream = 0;  // synthetic only: 0 = training walk, others = held-out walks
  int64_t min_tokens = 0;      // synthetic only: generate at least this many tokens
};

class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t num_tokens() const = 0;
  // Copies tokens [begin, begin + count) to `out`. Requires 0 <= begin, begin + count <=
  // num_tokens().
  virtual void Read(int64_t begin, int64_t count, int64_t* out) const = 0;
  // The token appended after each document (file), when the dataset appends one; else -1.
  virtual int64_t eos_id() const { return -1; }
  // Entropy rate of the source in nats/token when known (synthetic), else a negative number.
  virtual double entropy_rate_nats() const { return -1.0; }
  // One line describing the data for the log, e.g. "bin /data/x.bin: 1000000 tokens (uint16)".
  virtual std::string Describe() const = 0;
};

// Opens or generates the dataset. Errors name the path and what was wrong: NOT_FOUND for a missing
// file, INVALID_ARGUMENT for a file whose size is not a multiple of the token size, a token id
// >= vocab_size (with its offset), an empty dataset, a text/bin kind without a path, or a tokenizer
// with more ids than vocab_size (naming both numbers); the tokenizer's own errors (tokenizer.h). No
// error carries bytes of the file (a token's value included).
absl::StatusOr<std::unique_ptr<TokenDataset>> OpenDataset(const DatasetSpec& spec);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_DATA_DATASET_H_
