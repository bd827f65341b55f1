#include "common/tokenizer/bpe.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

// Words longer than this are encoded every time (rare: long runs of one class of characters), and
// the cache starts over once it holds this many ids, so its memory stays bounded on any corpus.
constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCachedIds = size_t{1} << 24;

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

absl::StatusOr<BytePairEncoder> BytePairEncoder::Create(BpeVocab vocab) {
  BytePairEncoder encoder(std::move(vocab));
  const BpeVocab& v = encoder.vocab_;
  int32_t max_id = -1;
  for (const auto& [bytes, id] : v.ids) max_id = std::max(max_id, id);
  encoder.vocab_size_ = int64_t{max_id} + 1;

  int missing = 0;
  int first_missing = -1;
  for (int b = 0; b < 256; ++b) {
    const auto it = v.ids.find(std::string(1, static_cast<char>(b)));
    encoder.byte_ids_[b] = it == v.ids.end() ? -1 : it->second;
    if (it == v.ids.end() && missing++ == 0) first_missing = b;
  }
  if (missing > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the vocabulary has no single-byte token for ", missing, " of the 256 byte values (the "
        "first is byte ", first_missing, "); a byte-level BPE needs all 256 so that any text "
        "encodes\nHINT: train with the byte-level alphabet (tokenizers: BpeTrainer(initial_alphabet"
        "=ByteLevel.alphabet()))"));
  }
  if (v.rule == BpeVocab::Rule::kMerges) {
    for (size_t i = 0; i < v.merges.size(); ++i) {
      const auto& [left, right] = v.merges[i];
      const auto l = v.ids.find(left);
      const auto r = v.ids.find(right);
      const auto merged = v.ids.find(left + right);
      if (l == v.ids.end() || r == v.ids.end() || merged == v.ids.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "merge ", i, " (0-based) ", l == v.ids.end() || r == v.ids.end()
                                            ? "names a token that is not in the vocabulary"
                                            : "makes a token that is not in the vocabulary"));
      }
      // A pair listed twice keeps its first (lowest) rank, as Hugging Face's loader does.
      encoder.pair_merges_.try_emplace(PairKey(l->second, r->second),
                                       Merge{static_cast<int32_t>(i), merged->second});
    }
  }
  return encoder;
}

BytePairEncoder::Merge BytePairEncoder::PairMerge(absl::string_view word, const Symbol& left,
                                                  const Symbol& right) const {
  if (vocab_.rule == BpeVocab::Rule::kRanks) {
    const auto it = vocab_.ids.find(word.substr(left.begin, left.size + right.size));
    if (it == vocab_.ids.end()) return {kNoMerge, -1};
    return {it->second, it->second};
  }
  const auto it = pair_merges_.find(PairKey(left.id, right.id));
  return it == pair_merges_.end() ? Merge{kNoMerge, -1} : it->second;
}

void BytePairEncoder::MergeWord(absl::string_view word, std::vector<int32_t>* ids) {
  if (vocab_.rule == BpeVocab::Rule::kRanks || vocab_.ignore_merges) {
    const auto it = vocab_.ids.find(word);
    if (it != vocab_.ids.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  // S = the word's symbols, one byte each to start; merge the lowest-ranked adjacent pair (the
  // leftmost of equals) until no pair merges. pairs_[i] is kept for symbols i, i + 1.
  symbols_.clear();
  for (size_t i = 0; i < word.size(); ++i) {
    symbols_.push_back({static_cast<uint32_t>(i), 1, byte_ids_[static_cast<unsigned char>(word[i])]});
  }
  pairs_.clear();
  for (size_t i = 0; i + 1 < symbols_.size(); ++i) {
    pairs_.push_back(PairMerge(word, symbols_[i], symbols_[i + 1]));
  }
  while (!pairs_.empty()) {
    size_t best = 0;
    for (size_t i = 1; i < pairs_.size(); ++i) {
      if (pairs_[i].rank < pairs_[best].rank) best = i;
    }
    if (pairs_[best].rank == kNoMerge) break;
    Symbol& merged = symbols_[best];
    merged.size += symbols_[best + 1].size;
    merged.id = pairs_[best].id;
    symbols_.erase(symbols_.begin() + best + 1);
    pairs_.erase(pairs_.begin() + best);
    if (best > 0) pairs_[best - 1] = PairMerge(word, symbols_[best - 1], merged);
    if (best < pairs_.size()) pairs_[best] = PairMerge(word, merged, symbols_[best + 1]);
  }
  for (const Symbol& s : symbols_) ids->push_back(s.id);
}

void BytePairEncoder::Encode(absl::string_view word, std::vector<int32_t>* ids) {
  if (word.size() > kMaxCachedWordBytes) {
    MergeWord(word, ids);
    return;
  }
  const auto hit = cache_.find(word);
  if (hit != cache_.end()) {
    const auto [offset, size] = hit->second;
    ids->insert(ids->end(), cached_ids_.begin() + offset, cached_ids_.begin() + offset + size);
    return;
  }
  const size_t before = ids->size();
  MergeWord(word, ids);
  if (cached_ids_.size() >= kMaxCachedIds) {
    cache_.clear();
    cached_ids_.clear();
  }
  const auto offset = static_cast<uint32_t>(cached_ids_.size());
  cached_ids_.insert(cached_ids_.end(), ids->begin() + before, ids->end());
  cache_.emplace(std::string(word), std::make_pair(offset, static_cast<uint32_t>(ids->size() - before)));
}

}  // namespace ringtrain
