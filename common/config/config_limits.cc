#include "common/config/config_limits.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/printable.h"

namespace ringtrain {
namespace {

// What the scan has seen: the largest figure of each bounded kind, and where it first went over.
struct Scan {
  int max_depth = 0;
  int64_t depth_line = 0;  // the first line past kMaxConfigDepth, 0 if none
  int keys = 0;
  size_t longest_key = 0;
  int64_t longest_key_line = 0;
};

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// The key text [begin, end) without trailing blanks.
size_t KeyLength(absl::string_view text, size_t begin, size_t end) {
  while (end > begin && IsBlank(text[end - 1])) --end;
  return end - begin;
}

class Scanner {
 public:
  explicit Scanner(absl::string_view text) : t_(text) {}

  Scan Run() {
    while (i_ < t_.size()) Step();
    return scan_;
  }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  bool At(absl::string_view s) const { return t_.substr(i_, s.size()) == s; }

  void NewLine() {
    ++line_;
    if (depth_ == 0) statement_start_ = true;
  }

  void NoteKey(size_t length) {
    ++scan_.keys;
    if (length > scan_.longest_key) {
      scan_.longest_key = length;
      scan_.longest_key_line = line_;
    }
  }

  void Open(char c) {
    ++depth_;
    if (depth_ > scan_.max_depth) scan_.max_depth = depth_;
    if (depth_ > kMaxConfigDepth && scan_.depth_line == 0) scan_.depth_line = line_;
    if (stack_.size() <= static_cast<size_t>(kMaxConfigDepth)) stack_.push_back(c);
    if (c == '{') awaiting_key_ = true;
  }

  void Close() {
    if (depth_ == 0) return;  // unbalanced: the parser reports it
    --depth_;
    if (stack_.size() > static_cast<size_t>(depth_)) stack_.resize(depth_);
    if (depth_ == 0 && header_start_ != kNone) {
      NoteKey(KeyLength(t_, header_start_, i_));
      header_start_ = kNone;
    }
  }

  // Skips a string that starts at i_ (`quote` is ", ', """ or '''), escapes in basic strings.
  void SkipString(absl::string_view quote) {
    const bool basic = quote[0] == '"';
    const bool multiline = quote.size() == 3;
    i_ += quote.size();
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (basic && c == '\\') {
        if (i_ + 1 < t_.size() && t_[i_ + 1] == '\n') ++line_;
        i_ += 2;
        continue;
      }
      if (c == '\n') {
        if (!multiline) return;  // unterminated: the parser says so; the newline is scanned next
        ++line_;
      }
      if (At(quote)) {
        i_ += quote.size();
        // """a"""" ends with a quote inside the string: up to two more quote characters.
        for (int extra = 0; multiline && extra < 2 && i_ < t_.size() && t_[i_] == quote[0]; ++extra)
          ++i_;
        return;
      }
      ++i_;
    }
  }

  void Step() {
    const char c = t_[i_];
    if (statement_start_ || awaiting_key_) {
      if (IsBlank(c)) {
        ++i_;
        return;
      }
      if (statement_start_ && c == '[') {  // a table header, [a.b] or [[a.b]]
        statement_start_ = false;
        Open('[');
        ++i_;
        if (i_ < t_.size() && t_[i_] == '[') {
          Open('[');
          ++i_;
        }
        header_start_ = i_;
        return;
      }
      if (c != '\n' && c != '#' && c != '}') key_start_ = i_;
      statement_start_ = false;
      awaiting_key_ = false;
    }
    switch (c) {
      case '\n':
        NewLine();
        ++i_;
        return;
      case '#':
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
        return;
      case '"': SkipString(At("\"\"\"") ? "\"\"\"" : "\""); return;
      case '\'': SkipString(At("'''") ? "'''" : "'"); return;
      case '[':
      case '{': Open(c); break;
      case ']':
      case '}': Close(); break;
      case ',':
        if (!stack_.empty() && stack_.back() == '{' &&
            static_cast<size_t>(depth_) == stack_.size()) {
          awaiting_key_ = true;
        }
        break;
      case '=':
        NoteKey(key_start_ == kNone ? 0 : KeyLength(t_, key_start_, i_));
        key_start_ = kNone;
        break;
      default: break;
    }
    ++i_;
  }

  absl::string_view t_;
  size_t i_ = 0;
  int64_t line_ = 1;
  int depth_ = 0;
  std::vector<char> stack_;      // the open brackets, up to kMaxConfigDepth + 1 of them
  bool statement_start_ = true;  // at the start of a line outside any bracket
  bool awaiting_key_ = false;    // after '{' or ',' in an inline table
  size_t key_start_ = kNone;     // where the key being read began
  size_t header_start_ = kNone;  // where the name of the table header being read began
  Scan scan_;
};

}  // namespace

absl::Status CheckConfigBounds(absl::string_view toml_text,
                               const std::vector<std::string>& overrides,
                               absl::string_view source_name) {
  std::vector<std::string> problems;
  if (toml_text.size() > kMaxConfigBytes) {
    // Larger text is not scanned at all: its size is the whole answer.
    problems.push_back(absl::StrCat("the config is ", toml_text.size(), " bytes; at most ",
                                    kMaxConfigBytes, " bytes (", kMaxConfigBytes / 1024,
                                    " KiB) are allowed"));
  } else {
    const Scan scan = Scanner(toml_text).Run();
    if (scan.max_depth > kMaxConfigDepth) {
      problems.push_back(absl::StrCat(
          "brackets nest ", scan.max_depth, " levels deep (first past the limit at line ",
          scan.depth_line, "); at most ", kMaxConfigDepth, " levels are allowed"));
    }
    if (scan.keys > kMaxConfigKeys) {
      problems.push_back(absl::StrCat("the config has ", scan.keys,
                                      " keys and table headers; at most ", kMaxConfigKeys,
                                      " are allowed"));
    }
    if (scan.longest_key > kMaxKeyPathBytes) {
      problems.push_back(absl::StrCat("a key path at line ", scan.longest_key_line, " is ",
                                      scan.longest_key, " bytes long; at most ", kMaxKeyPathBytes,
                                      " bytes are allowed"));
    }
  }
  if (overrides.size() > kMaxOverrides) {
    problems.push_back(
        absl::StrCat(overrides.size(), " overrides; at most ", kMaxOverrides, " are allowed"));
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    if (overrides[i].size() > kMaxOverrideBytes) {
      problems.push_back(absl::StrCat("override ", i + 1, " (", Utf8Prefix(overrides[i], 40),
                                      "...) is ", overrides[i].size(), " bytes; at most ",
                                      kMaxOverrideBytes, " bytes are allowed"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      JoinProblems(absl::StrCat("invalid config ", source_name), problems));
}

std::string JoinProblems(absl::string_view what, const std::vector<std::string>& problems) {
  const size_t shown = std::min(problems.size(), kMaxReportedProblems);
  std::string out = absl::StrCat(
      what, ":\n  ",
      absl::StrJoin(problems.begin(), problems.begin() + static_cast<ptrdiff_t>(shown), "\n  "));
  if (problems.size() > shown) {
    absl::StrAppend(&out, "\n  ... and ", problems.size() - shown, " more problem",
                    problems.size() - shown == 1 ? "" : "s");
  }
  return out;
}

}  // namespace ringtrain
