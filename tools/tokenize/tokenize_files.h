// Tokenizes text files into one token file in the layout the `bin` dataset reads
// (worker/engine/data/dataset.h): the ids of every input in order, each a little-endian uint16 or
// uint32, nothing else — nanoGPT's .bin. Torch-free.
#ifndef RINGTRAIN_TOOLS_TOKENIZE_TOKENIZE_FILES_H_
#define RINGTRAIN_TOOLS_TOKENIZE_TOKENIZE_FILES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringtrain {

struct TokenizeOptions {
  std::vector<std::string> inputs;  // regular files, tokenized one at a time, in this order
  std::string tokenizer_path;       // tokenizer.json or tiktoken (common/tokenizer/tokenizer.h)
  std::string out;                  // written as out + ".tmp", renamed into place when complete
  std::string dtype = "auto";       // "uint16", "uint32", or "auto": uint16 when every id fits
  int64_t eos_id = -1;              // >= 0: appended after each input's tokens (a separator)
};

struct TokenizeSummary {
  std::string tokenizer;  // Tokenizer::Describe()
  std::string dtype;      // "uint16" or "uint32"
  int64_t files = 0;
  int64_t bytes = 0;   // of input
  int64_t tokens = 0;  // written (the separators included)
  double seconds = 0;  // tokenizing and writing, the tokenizer's load not counted
};

// Called with (input bytes done, tokens done, 1-based input file) as the work goes on.
using TokenizeProgress = std::function<void(int64_t, int64_t, int64_t)>;

// NOT_FOUND for a missing input or tokenizer; INVALID_ARGUMENT for a folder given as an input, a
// dtype the vocabulary does not fit ("uint16" with more than 65536 ids), an eos_id outside the
// vocabulary; the errno's code when the output cannot be written. Nothing is left at `out` (or
// its .tmp) on failure.
absl::StatusOr<TokenizeSummary> TokenizeFiles(const TokenizeOptions& options,
                                              const TokenizeProgress& progress);

}  // namespace ringtrain

#endif  // RINGTRAIN_TOOLS_TOKENIZE_TOKENIZE_FILES_H_
