#include "common/tokenizer/regex_splitter.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

// The JIT's stack for one match grows up to this (a run of millions of spaces needs little).
constexpr size_t kMaxJitStack = 8 * 1024 * 1024;

}  // namespace

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UCP: \s, \d, \w and case folding by Unicode properties, as Oniguruma (Hugging Face) and
  // fancy-regex (tiktoken) read them. MATCH_INVALID_UTF: text need not be valid UTF-8.
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat(
        "the pre-tokenizer pattern does not compile: ", reinterpret_cast<const char*>(message),
        " at offset ", offset));
  }
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<RegexSplitter>(new RegexSplitter(pattern, code, jit));
}

RegexSplitter::RegexSplitter(std::string pattern, pcre2_code* code, bool jit)
    : pattern_(std::move(pattern)),
      code_(code),
      match_(pcre2_match_data_create_from_pattern(code, nullptr)),
      context_(pcre2_match_context_create(nullptr)),
      jit_stack_(pcre2_jit_stack_create(32 * 1024, kMaxJitStack, nullptr)),
      jit_(jit) {
  pcre2_jit_stack_assign(context_, nullptr, jit_stack_);
}

RegexSplitter::~RegexSplitter() {
  pcre2_jit_stack_free(jit_stack_);
  pcre2_match_context_free(context_);
  pcre2_match_data_free(match_);
  pcre2_code_free(code_);
}

bool RegexSplitter::NextMatch(absl::string_view text, size_t start, size_t* begin, size_t* end) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = PCRE2_ERROR_JIT_STACKLIMIT;
  if (jit_) rc = pcre2_jit_match(code_, subject, text.size(), start, 0, match_, context_);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(code_, subject, text.size(), start, 0, match_, nullptr);
  }
  if (rc < 0) return false;  // no match, or a limit of PCRE2's: the rest is one stretch
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_);
  *begin = ovector[0];
  *end = ovector[1];
  return true;
}

void RegexSplitter::Split(absl::string_view text,
                          absl::FunctionRef<void(absl::string_view)> piece) {
  size_t start = 0;    // where the next search begins
  size_t emitted = 0;  // text[0, emitted) has been handed out
  size_t begin = 0;
  size_t end = 0;
  while (start < text.size() && NextMatch(text, start, &begin, &end)) {
    if (end == begin) {  // an empty match: move on by one character
      start = begin + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
        ++start;
      }
      continue;
    }
    if (begin > emitted) piece(text.substr(emitted, begin - emitted));
    piece(text.substr(begin, end - begin));
    emitted = start = end;
  }
  if (emitted < text.size()) piece(text.substr(emitted));
}

}  // namespace ringtrain
