// Pre-tokenization by regular expression, as Hugging Face's Split pre-tokenizer with behavior
// "Isolated" (and ByteLevel's use_regex) and tiktoken do it: every match is one piece, and so is
// every stretch between two matches. PCRE2 in UTF mode with Unicode properties (\p{L}, \s) and its
// JIT compiler. Torch-free.
#ifndef RINGTRAIN_COMMON_TOKENIZER_REGEX_SPLITTER_H_
#define RINGTRAIN_COMMON_TOKENIZER_REGEX_SPLITTER_H_

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

// GPT-2's pattern (Hugging Face's ByteLevel pre-tokenizer with use_regex = true).
inline constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// tiktoken's cl100k_base pattern, which Llama 3 uses (its tokenizer.json's Split pattern too).
inline constexpr char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// One compiled pattern. Split is not thread-safe: it reuses one match block.
class RegexSplitter {
 public:
  // INVALID_ARGUMENT with PCRE2's message and offset when the pattern does not compile.
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Calls `piece` with every match and every non-empty stretch between matches, in order, so the
  // pieces concatenate to `text`. Bytes that are not valid UTF-8 never match (they end up in the
  // stretches between matches); an empty match is skipped. A match the JIT runs out of stack for
  // is retried by the interpreter; one that exceeds PCRE2's own limits ends the matching, and the
  // rest of the text is one stretch (never seen with these patterns: a 2 MB run of spaces works).
  void Split(absl::string_view text, absl::FunctionRef<void(absl::string_view)> piece);

  const std::string& pattern() const { return pattern_; }

 private:
  RegexSplitter(std::string pattern, pcre2_code* code, bool jit);
  // The next match at or after `start`: its [begin, end), or false when there is none.
  bool NextMatch(absl::string_view text, size_t start, size_t* begin, size_t* end);

  std::string pattern_;
  pcre2_code* code_;
  pcre2_match_data* match_;
  pcre2_match_context* context_;  // the JIT stack, grown on demand up to kMaxJitStack
  pcre2_jit_stack* jit_stack_;
  bool jit_;  // compiled by the JIT (it is unavailable on some platforms: then interpreted)
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_TOKENIZER_REGEX_SPLITTER_H_
