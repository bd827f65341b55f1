// Byte-pair encoding of one pre-token ("word"), on raw bytes. Two rules for which adjacent pair
// merges next, both lowest rank first and leftmost among equals:
//   kMerges  Hugging Face's BPE model: only listed merges (left, right) apply, ranked by their
//            place in the list; the result is the vocabulary's token for left + right.
//   kRanks   tiktoken's: any adjacent pair whose concatenation is a token may merge, ranked by
//            that token's rank (its id); a word that is itself a token is that token.
// Torch-free.
#ifndef RINGTRAIN_COMMON_TOKENIZER_BPE_H_
#define RINGTRAIN_COMMON_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

struct BpeVocab {
  enum class Rule { kMerges, kRanks };
  Rule rule = Rule::kMerges;
  absl::flat_hash_map<std::string, int32_t> ids;            // token bytes -> id
  std::vector<std::pair<std::string, std::string>> merges;  // kMerges: in rank order
  bool ignore_merges = false;  // kMerges: a word that is a token is that token (always for kRanks)
};

// Not thread-safe: the word cache is shared by every Encode. Give each thread its own.
class BytePairEncoder {
 public:
  // INVALID_ARGUMENT when a byte value has no single-byte token (every byte must have one, so that
  // any input encodes), or a merge names a token the vocabulary lacks or makes one it lacks; the
  // message says which (by index and id, never by bytes of the file).
  static absl::StatusOr<BytePairEncoder> Create(BpeVocab vocab);

  // Appends the ids of `word` (non-empty) to `ids`.
  void Encode(absl::string_view word, std::vector<int32_t>* ids);

  // The vocabulary's largest id + 1.
  int64_t vocab_size() const { return vocab_size_; }
  BpeVocab::Rule rule() const { return vocab_.rule; }
  int64_t num_merges() const { return static_cast<int64_t>(pair_merges_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  // A stretch of the word, linked to its neighbours (-1: none); size 0 once merged into its left.
  struct Symbol {
    uint32_t begin;  // byte offset in the word
    uint32_t size;
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  // A merge of the symbol at `pos` with its right neighbour, as it was when queued.
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t id;
  };
  static constexpr int32_t kNoMerge = INT32_MAX;

  explicit BytePairEncoder(BpeVocab vocab) : vocab_(std::move(vocab)) {}
  // The merge of symbols `left` and `right` (adjacent) of `word`, or rank kNoMerge.
  Merge PairMerge(absl::string_view word, const Symbol& left, const Symbol& right) const;
  // Queues the merge of symbols_[left] with its right neighbour, if there is one.
  void QueueMerge(absl::string_view word, int32_t left);
  void MergeWord(absl::string_view word, std::vector<int32_t>* ids);

  BpeVocab vocab_;
  std::array<int32_t, 256> byte_ids_{};
  absl::flat_hash_map<uint64_t, Merge> pair_merges_;  // kMerges: (left id << 32 | right id)
  int64_t vocab_size_ = 0;
  // Word -> its ids (cached_ids_[offset, offset + size)). Cleared when it grows past a bound.
  absl::flat_hash_map<std::string, std::pair<uint32_t, uint32_t>> cache_;
  std::vector<int32_t> cached_ids_;
  std::vector<Symbol> symbols_;        // scratch, reused across words
  std::vector<Candidate> candidates_;  // scratch: a heap, the lowest rank (then position) on top
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_TOKENIZER_BPE_H_
