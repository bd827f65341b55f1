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

// Heap order: `a` comes after `b` (a higher rank, or the same rank further right).
template <typename C>
bool LaterCandidate(const C& a, const C& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

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
        "the vocabulary has no single-byte token for ", missing,
        " of the 256 byte values (the "
        "first is byte ",
        first_missing,
        "); a byte-level BPE needs all 256 so that any text "
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
            "merge ", i, " (0-based) ",
            l == v.ids.end() || r == v.ids.end() ? "names a token that is not in the vocabulary"
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

void BytePairEncoder::QueueMerge(absl::string_view word, int32_t left) {
  const Symbol& l = symbols_[left];
  if (l.next < 0) return;
  const Merge m = PairMerge(word, l, symbols_[l.next]);
  if (m.rank == kNoMerge) return;
  candidates_.push_back({m.rank, left, m.id});
  std::push_heap(candidates_.begin(), candidates_.end(), LaterCandidate<Candidate>);
}

// Hugging Face's Word::merge_all, which tiktoken's rule gives too: a heap of candidate merges,
// lowest rank first and leftmost among equals; a candidate whose pair has changed since it was
// queued (its pair no longer makes the same token) is dropped. O(n log n) in the word's length.
void BytePairEncoder::MergeWord(absl::string_view word, std::vector<int32_t>* ids) {
  if (vocab_.rule == BpeVocab::Rule::kRanks || vocab_.ignore_merges) {
    const auto it = vocab_.ids.find(word);
    if (it != vocab_.ids.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const auto n = static_cast<int32_t>(word.size());
  symbols_.clear();
  for (int32_t i = 0; i < n; ++i) {
    symbols_.push_back({static_cast<uint32_t>(i), 1, byte_ids_[static_cast<unsigned char>(word[i])],
                        i - 1, i + 1 < n ? i + 1 : -1});
  }
  candidates_.clear();
  for (int32_t i = 0; i + 1 < n; ++i) QueueMerge(word, i);
  while (!candidates_.empty()) {
    std::pop_heap(candidates_.begin(), candidates_.end(), LaterCandidate<Candidate>);
    const Candidate top = candidates_.back();
    candidates_.pop_back();
    Symbol& left = symbols_[top.pos];
    if (left.size == 0 || left.next < 0) continue;  // merged away, or now the last symbol
    Symbol& right = symbols_[left.next];
    const Merge now = PairMerge(word, left, right);
    if (now.rank == kNoMerge || now.id != top.id) continue;  // an expired candidate
    left.size += right.size;
    left.id = top.id;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols_[right.next].prev = top.pos;
    if (left.prev >= 0) QueueMerge(word, left.prev);
    QueueMerge(word, top.pos);
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols_[i].next) ids->push_back(symbols_[i].id);
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
  cache_.emplace(std::string(word),
                 std::make_pair(offset, static_cast<uint32_t>(ids->size() - before)));
}

}  // namespace ringtrain
