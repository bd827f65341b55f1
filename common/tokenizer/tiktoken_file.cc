// tiktoken's BPE file (Llama 3's tokenizer.model): one "base64-bytes rank" line per token.
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/tokenizer/tokenizer.h"

namespace ringtrain::tokenizer_internal {

absl::StatusOr<TokenizerParts> ParseTiktoken(const std::string& name, const std::string& text) {
  TokenizerParts parts;
  parts.format = "tiktoken";
  parts.patterns = {kLlama3Pattern};
  parts.vocab.rule = BpeVocab::Rule::kRanks;
  absl::flat_hash_set<int32_t> ranks;
  const auto bad = [&](int64_t line, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer ", name, ": line ", line, ": ", what,
        "\nHINT: a tiktoken file has one \"<base64 bytes> <rank>\" line per token; a Hugging Face "
        "tokenizer.json starts with '{'"));
  };
  int64_t line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;  // as tiktoken's loader: blank lines are skipped
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    if (fields.size() != 2) return bad(line_number, "not two fields separated by one space");
    std::string bytes;
    if (fields[0].empty() || !absl::Base64Unescape(fields[0], &bytes)) {
      return bad(line_number, "bad base64 in the first field");
    }
    int32_t rank = -1;
    if (!absl::SimpleAtoi(fields[1], &rank) || rank < 0) {
      return bad(line_number, "the rank (second field) is not an integer in [0, 2^31)");
    }
    if (!ranks.insert(rank).second) return bad(line_number, absl::StrCat("rank ", rank, " again"));
    if (!parts.vocab.ids.emplace(std::move(bytes), rank).second) {
      return bad(line_number, "the same token bytes as an earlier line");
    }
  }
  if (parts.vocab.ids.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer ", name,
                     ": no tokens (an empty file?); expected a Hugging Face tokenizer.json "
                     "or a tiktoken file of \"<base64 bytes> <rank>\" lines"));
  }
  return parts;
}

}  // namespace ringtrain::tokenizer_internal
