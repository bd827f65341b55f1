#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/utf8_lossy.h"

namespace ringtrain {
namespace {

constexpr int64_t kProgressEvery = int64_t{1} << 20;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::ErrnoToStatus(errno, absl::StrCat("tokenizer ", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::ErrnoToStatus(errno, absl::StrCat("tokenizer ", path, ": read"));
  return text.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  RT_ASSIGN_OR_RETURN(const std::string text, ReadWholeFile(path));
  const size_t first = text.find_first_not_of(" \t\r\n");
  absl::StatusOr<TokenizerParts> parts = first != std::string::npos && text[first] == '{'
                                             ? tokenizer_internal::ParseTokenizerJson(path, text)
                                             : tokenizer_internal::ParseTiktoken(path, text);
  if (!parts.ok()) return parts.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = FromParts(*std::move(parts));
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("tokenizer ", path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromParts(TokenizerParts parts) {
  std::vector<std::unique_ptr<RegexSplitter>> splitters;
  for (const std::string& pattern : parts.patterns) {
    RT_ASSIGN_OR_RETURN(std::unique_ptr<RegexSplitter> splitter, RegexSplitter::Create(pattern));
    splitters.push_back(std::move(splitter));
  }
  for (const AddedToken& token : parts.added) {
    if (token.content.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("added token ", token.id, " is empty; every added token needs content"));
    }
  }
  // Hugging Face looks an id up among the added tokens first, so they come last (and win).
  std::vector<std::pair<int32_t, std::string>> tokens;
  tokens.reserve(parts.vocab.ids.size() + parts.added.size());
  for (const auto& [bytes, id] : parts.vocab.ids) tokens.emplace_back(id, bytes);
  for (const AddedToken& token : parts.added) {
    tokens.emplace_back(token.id, ByteLevelDecoderBytes(token.content));
  }
  TokenDecoder decoder(tokens);
  BpeVocab vocab = std::move(parts.vocab);
  RT_ASSIGN_OR_RETURN(BytePairEncoder bpe, BytePairEncoder::Create(std::move(vocab)));
  return std::unique_ptr<Tokenizer>(
      new Tokenizer(std::move(parts), std::move(bpe), std::move(decoder), std::move(splitters)));
}

Tokenizer::Tokenizer(TokenizerParts parts, BytePairEncoder bpe, TokenDecoder decoder,
                     std::vector<std::unique_ptr<RegexSplitter>> splitters)
    : parts_(std::move(parts)),
      bpe_(std::move(bpe)),
      decoder_(std::move(decoder)),
      splitters_(std::move(splitters)),
      added_by_first_byte_(256) {
  vocab_size_ = bpe_.vocab_size();
  for (const AddedToken& token : parts_.added) {
    vocab_size_ = std::max(vocab_size_, int64_t{token.id} + 1);
    added_by_first_byte_[static_cast<unsigned char>(token.content[0])].push_back(&token);
  }
  for (auto& list : added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [](const AddedToken* a, const AddedToken* b) {
      return a->content.size() > b->content.size();
    });
  }
}

const AddedToken* Tokenizer::AddedTokenAt(absl::string_view text, size_t pos) const {
  for (const AddedToken* token : added_by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    if (text.substr(pos, token->content.size()) == token->content) return token;
  }
  return nullptr;
}

void Tokenizer::EncodeSegment(absl::string_view text, size_t level, std::vector<int32_t>* ids) {
  if (level == splitters_.size()) {
    bpe_.Encode(text, ids);
    return;
  }
  splitters_[level]->Split(text,
                           [&](absl::string_view piece) { EncodeSegment(piece, level + 1, ids); });
}

void Tokenizer::Encode(absl::string_view text, std::vector<int32_t>* ids,
                       const std::function<void(int64_t)>& progress) {
  // Segments between added tokens are pre-tokenized and encoded on their own, each in slices that
  // end where a piece of the first split ends, so progress can be told within a long segment.
  int64_t reported = 0;
  const auto encode_segment = [&](absl::string_view segment, size_t segment_begin) {
    if (segment.empty()) return;
    std::string prefixed;
    if (parts_.add_prefix_space && segment[0] != ' ') {
      prefixed = absl::StrCat(" ", segment);
      segment = prefixed;
    }
    if (splitters_.empty()) {
      bpe_.Encode(segment, ids);
      return;
    }
    size_t done = 0;
    splitters_[0]->Split(segment, [&](absl::string_view piece) {
      EncodeSegment(piece, 1, ids);
      done += piece.size();
      if (progress && int64_t(segment_begin + done) - reported >= kProgressEvery) {
        reported = static_cast<int64_t>(segment_begin + std::min(done, segment.size()));
        progress(reported);
      }
    });
  };
  size_t segment_begin = 0;
  if (!parts_.added.empty()) {
    for (size_t pos = 0; pos < text.size();) {
      const AddedToken* token = AddedTokenAt(text, pos);
      if (token == nullptr) {
        ++pos;
        continue;
      }
      encode_segment(text.substr(segment_begin, pos - segment_begin), segment_begin);
      ids->push_back(token->id);
      pos += token->content.size();
      segment_begin = pos;
    }
  }
  encode_segment(text.substr(segment_begin), segment_begin);
  if (progress) progress(static_cast<int64_t>(text.size()));
}

absl::StatusOr<std::string> Tokenizer::DecodeBytes(const std::vector<int32_t>& ids) const {
  if (!parts_.unsupported_decoder.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot decode: the tokenizer.json's decoder is ", parts_.unsupported_decoder,
                     "; only the ByteLevel decoder (as GPT-2 and Llama 3 ship) is supported"));
  }
  return decoder_.Decode(ids);
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  RT_ASSIGN_OR_RETURN(const std::string bytes, DecodeBytes(ids));
  return Utf8Lossy(bytes);
}

int64_t Tokenizer::end_of_text_id() const {
  for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>"}) {
    for (const AddedToken& token : parts_.added) {
      if (token.content == name) return token.id;
    }
  }
  return -1;
}

std::string Tokenizer::Describe() const {
  return absl::StrCat(parts_.format, ": byte-level BPE, ", vocab_size_, " ids (",
                      bpe_.rule() == BpeVocab::Rule::kRanks
                          ? "merges by rank"
                          : absl::StrCat(bpe_.num_merges(), " merges"),
                      ", ", parts_.added.size(), " added tokens)");
}

}  // namespace ringtrain
