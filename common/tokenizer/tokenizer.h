// A byte-level BPE tokenizer, loaded from either of the two files current models ship:
//
//   tokenizer.json  Hugging Face's format with model.type "BPE": the pre-tokenizer ByteLevel
//                   (GPT-2's pattern when its use_regex is true), or a Sequence of Split steps
//                   (behavior "Isolated", Regex patterns) followed by ByteLevel with use_regex
//                   false, as Llama 3 ships; added_tokens (special or not) are matched in the raw
//                   text before anything else, leftmost-longest; ignore_merges is honoured.
//   tiktoken        one "base64-bytes rank" line per token (Llama 3's tokenizer.model): ids are
//                   the ranks, merges are implied by them (tiktoken's rule, bpe.h), and the text
//                   is pre-tokenized with Llama 3's pattern (= tiktoken's cl100k_base). The file
//                   has no special tokens, so none are matched, and Decode refuses their ids
//                   (Llama 3's 128000.. are defined by the code that loads the file, not in it).
//
// Encode gives what Hugging Face's encode(text, add_special_tokens=False) or tiktoken's
// encode(text, allowed_special="all") gives: no BOS/EOS or other post-processing. Decode gives what
// Hugging Face's decode(ids, skip_special_tokens=False) gives with the ByteLevel decoder (the only
// decoder supported), or tiktoken's decode(ids). Torch-free.
#ifndef RINGTRAIN_COMMON_TOKENIZER_TOKENIZER_H_
#define RINGTRAIN_COMMON_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/bpe.h"
#include "common/tokenizer/regex_splitter.h"
#include "common/tokenizer/token_decoder.h"

namespace ringtrain {

struct AddedToken {
  std::string content;
  int32_t id = 0;
};

// What a tokenizer file describes (tokenizer_json.cc and tiktoken_file.cc fill it).
struct TokenizerParts {
  std::string format;                 // "tokenizer.json" or "tiktoken"
  std::vector<std::string> patterns;  // pre-tokenizer splits, applied in order to every piece
  bool add_prefix_space = false;      // ByteLevel: a space before a segment not starting with one
  BpeVocab vocab;
  std::vector<AddedToken> added;
  // Empty when Decode can give what the file's own decoder gives (ByteLevel; tiktoken's raw
  // bytes); else what the decoder is ("null", "\"Sequence\"", ...), for Decode's error.
  std::string unsupported_decoder;
};

// Encode is not thread-safe (the BPE word cache, the regex match blocks): one per thread that
// encodes. Decode is (below).
class Tokenizer {
 public:
  // Reads `path`: a file whose first non-blank byte is '{' is a tokenizer.json, anything else a
  // tiktoken file. NOT_FOUND for a missing file; INVALID_ARGUMENT naming the file and what is wrong
  // (not JSON, an unsupported model type or pre-tokenizer, a missing field, bad base64 at line N).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromParts(TokenizerParts parts);

  // Appends the ids of `text` to `ids`. `progress`, when given, is called with the bytes of `text`
  // done so far, about every MiB and at the end.
  void Encode(absl::string_view text, std::vector<int32_t>* ids,
              const std::function<void(int64_t)>& progress = nullptr);

  // The text of `ids`: each id's bytes joined (a vocabulary token's bytes; an added token's
  // content, special or not, through the ByteLevel decoder's rule, byte_level.h), then every
  // maximal invalid UTF-8 subsequence replaced by one U+FFFD (utf8_lossy.h), as Hugging Face and
  // tiktoken do to the whole output. So a token that is half a character decodes to U+FFFD on its
  // own, and to the character next to the token holding its other half. INVALID_ARGUMENT naming
  // the first id that has no token (Hugging Face skips such ids silently, tiktoken raises);
  // FAILED_PRECONDITION for a tokenizer.json whose decoder is not ByteLevel. Reads only tables
  // fixed at load (never Encode's caches), so any number of threads may decode at once, even while
  // one encodes.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const;
  // The same bytes before the replacement, for a caller that prints ids as they come (a generator):
  // a character split across two tokens comes out whole once both are written.
  absl::StatusOr<std::string> DecodeBytes(const std::vector<int32_t>& ids) const;

  // The id of the added token that ends a text — "<|end_of_text|>" (Llama 3), "<|endoftext|>"
  // (GPT-2) or "</s>", the first of them the file has — or -1 when it has none (a tiktoken file
  // has no added tokens).
  int64_t end_of_text_id() const;
  // Largest id + 1 over the vocabulary and the added tokens: the least model.vocab_size.
  int64_t vocab_size() const { return vocab_size_; }
  // One line for logs: "tokenizer.json: byte-level BPE, 1000 ids (744 merges, 2 added tokens)".
  std::string Describe() const;

 private:
  Tokenizer(TokenizerParts parts, BytePairEncoder bpe, TokenDecoder decoder,
            std::vector<std::unique_ptr<RegexSplitter>> splitters);
  // Pre-tokenizes `text` (no added tokens in it) with splitters_[level..] and encodes each piece.
  void EncodeSegment(absl::string_view text, size_t level, std::vector<int32_t>* ids);
  // The longest added token starting at text[pos], or nullptr.
  const AddedToken* AddedTokenAt(absl::string_view text, size_t pos) const;

  TokenizerParts parts_;
  BytePairEncoder bpe_;
  TokenDecoder decoder_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;
  std::vector<std::vector<const AddedToken*>> added_by_first_byte_;  // 256 lists, longest first
  int64_t vocab_size_ = 0;
};

namespace tokenizer_internal {
// The two file formats, parsed. `name` is the path, for messages; errors never quote the file.
absl::StatusOr<TokenizerParts> ParseTokenizerJson(const std::string& name, const std::string& text);
absl::StatusOr<TokenizerParts> ParseTiktoken(const std::string& name, const std::string& text);
}  // namespace tokenizer_internal

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_TOKENIZER_TOKENIZER_H_
