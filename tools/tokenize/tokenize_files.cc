#include "tools/tokenize/tokenize_files.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tokenizer/tokenizer.h"

namespace ringtrain {
namespace {

constexpr int64_t kUint16Ids = int64_t{1} << 16;

// The input's size; INVALID_ARGUMENT for anything but a regular file.
absl::StatusOr<int64_t> InputSize(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("input ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", path, ": not a regular file", S_ISDIR(st.st_mode) ? " but a folder" : "",
        "; give the files to tokenize (e.g. ", path, "/*.txt)"));
  }
  return static_cast<int64_t>(st.st_size);
}

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::ErrnoToStatus(errno, absl::StrCat("input ", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::ErrnoToStatus(errno, absl::StrCat("input ", path, ": read"));
  return text.str();
}

// Appends ids as little-endian integers of `width` bytes.
void AppendTokens(const std::vector<int32_t>& ids, int width, std::string* out) {
  out->reserve(out->size() + ids.size() * width);
  for (const int32_t id : ids) {
    const auto v = static_cast<uint32_t>(id);
    for (int b = 0; b < width; ++b) out->push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
  }
}

// Removes the temporary file unless released (the output is complete).
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  ~TempFileGuard() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

}  // namespace

absl::StatusOr<TokenizeSummary> TokenizeFiles(const TokenizeOptions& options,
                                              const TokenizeProgress& progress) {
  int64_t total_bytes = 0;
  for (const std::string& input : options.inputs) {
    RT_ASSIGN_OR_RETURN(const int64_t size, InputSize(input));
    total_bytes += size;
  }
  RT_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                      Tokenizer::Load(options.tokenizer_path));
  TokenizeSummary summary;
  summary.tokenizer = tokenizer->Describe();
  const int64_t vocab = tokenizer->vocab_size();
  summary.dtype =
      options.dtype == "auto" ? (vocab <= kUint16Ids ? "uint16" : "uint32") : options.dtype;
  if (summary.dtype != "uint16" && summary.dtype != "uint32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype ", options.dtype, ": must be uint16, uint32 or auto"));
  }
  if (summary.dtype == "uint16" && vocab > kUint16Ids) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype uint16 holds ids below 65536, and the tokenizer has ", vocab,
                     " ids; use --dtype uint32 (and training.token_dtype = \"uint32\")"));
  }
  if (options.eos_id >= vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("--eos-id ", options.eos_id, " is not below the tokenizer's ", vocab, " ids"));
  }
  const int width = summary.dtype == "uint16" ? 2 : 4;

  const std::string temp = options.out + ".tmp";
  std::FILE* file = std::fopen(temp.c_str(), "wb");
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("output ", temp));
  TempFileGuard guard(temp);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(file, &std::fclose);

  const auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> ids;
  std::string bytes;
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    RT_ASSIGN_OR_RETURN(const std::string text, ReadInput(options.inputs[i]));
    ids.clear();
    const auto file_number = static_cast<int64_t>(i + 1);
    const int64_t bytes_before = summary.bytes;
    const int64_t tokens_before = summary.tokens;
    tokenizer->Encode(text, &ids, [&](int64_t done) {
      if (progress) progress(bytes_before + done, tokens_before + int64_t(ids.size()), file_number);
    });
    if (options.eos_id >= 0) ids.push_back(static_cast<int32_t>(options.eos_id));
    bytes.clear();
    AppendTokens(ids, width, &bytes);
    if (std::fwrite(bytes.data(), 1, bytes.size(), out.get()) != bytes.size()) {
      return absl::UnavailableError(absl::StrCat("output ", temp, ": write failed (disk full?)"));
    }
    summary.files += 1;
    summary.bytes += static_cast<int64_t>(text.size());
    summary.tokens += static_cast<int64_t>(ids.size());
  }
  if (std::fflush(out.get()) != 0 || std::fclose(out.release()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("output ", temp, ": write"));
  }
  if (std::rename(temp.c_str(), options.out.c_str()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("output ", options.out, ": rename from ", temp));
  }
  guard.Release();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace ringtrain
