// The file-backed datasets (text, bin) and OpenDataset's dispatch; the synthetic source lives in
// synthetic_source.cc.
#include "worker/engine/data/dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tokenizer/tokenizer.h"
#include "worker/engine/data/synthetic_source.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

// Bytes, one token each, so text needs a vocabulary of at least 256.
constexpr int64_t kByteVocab = 256;

// An open file descriptor, closed on scope exit.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Opens `path` read-only and returns its descriptor and size; the errno of a failed open or stat
// picks the code (ENOENT -> NOT_FOUND) and the message carries strerror.
absl::Status OpenRegularFile(const std::string& what, const std::string& path,
                             std::unique_ptr<ScopedFd>* fd, int64_t* size) {
  *fd = std::make_unique<ScopedFd>(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if ((*fd)->get() < 0) return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
  struct stat st;
  if (fstat((*fd)->get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, ": not a regular file; ", what, " expects a file"));
  }
  *size = static_cast<int64_t>(st.st_size);
  return absl::OkStatus();
}

// Appends the whole of `path` to `out`.
absl::Status AppendFile(const std::string& path, std::string* out) {
  std::unique_ptr<ScopedFd> fd;
  int64_t size = 0;
  RT_RETURN_IF_ERROR(OpenRegularFile("text", path, &fd, &size));
  const size_t start = out->size();
  out->resize(start + static_cast<size_t>(size));
  size_t done = 0;
  while (done < static_cast<size_t>(size)) {
    const ssize_t n = read(fd->get(), out->data() + start + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("text ", path, ": read"));
    if (n == 0) break;  // The file shrank while we read it; keep what was there.
    done += static_cast<size_t>(n);
  }
  out->resize(start + done);
  return absl::OkStatus();
}

// The regular files under `dir`, recursively, skipping hidden files and folders (".git", editor
// swap files). Sorted by std::filesystem::path order, which compares component by component, so a
// folder's contents come out as a depth-first walk that visits each folder's entries in name order.
absl::StatusOr<std::vector<fs::path>> ListTextFiles(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec);
  const auto walk_error = [&](const std::error_code& e) {
    return absl::ErrnoToStatus(e.value(), absl::StrCat("text ", dir.string(), ": listing"));
  };
  if (ec) return walk_error(ec);
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return walk_error(ec);
    const fs::directory_entry& entry = *it;
    std::error_code entry_ec;  // a broken symlink is skipped, not an error
    if (entry.path().filename().string().rfind('.', 0) == 0) {
      if (entry.is_directory(entry_ec)) it.disable_recursion_pending();
      continue;
    }
    if (entry.is_regular_file(entry_ec)) files.push_back(entry.path());
  }
  if (ec) return walk_error(ec);
  std::sort(files.begin(), files.end());
  return files;
}

// text: every byte of the input is one token. Immutable after construction; Read is thread-safe.
class TextDataset : public TokenDataset {
 public:
  TextDataset(std::string path, int64_t num_files, std::string bytes)
      : path_(std::move(path)), num_files_(num_files), bytes_(std::move(bytes)) {}

  int64_t num_tokens() const override { return static_cast<int64_t>(bytes_.size()); }

  void Read(int64_t begin, int64_t count, int64_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<unsigned char>(bytes_[begin + i]);
  }

  std::string Describe() const override {
    return absl::StrCat("text ", path_, ": ", num_tokens(), " tokens (bytes of ", num_files_,
                        num_files_ == 1 ? " file)" : " files)");
  }

 private:
  std::string path_;
  int64_t num_files_;
  std::string bytes_;
};

// text with a tokenizer: each file's ids, each followed by the EOS token when there is one,
// concatenated. Immutable after construction; Read is thread-safe.
class TokenizedTextDataset : public TokenDataset {
 public:
  TokenizedTextDataset(std::string path, int64_t num_files, std::string tokenizer,
                       std::vector<int32_t> tokens, int64_t eos_id)
      : path_(std::move(path)),
        num_files_(num_files),
        tokenizer_(std::move(tokenizer)),
        tokens_(std::move(tokens)),
        eos_id_(eos_id) {}

  int64_t eos_id() const override { return eos_id_; }

  int64_t num_tokens() const override { return static_cast<int64_t>(tokens_.size()); }

  void Read(int64_t begin, int64_t count, int64_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = tokens_[begin + i];
  }

  std::string Describe() const override {
    return absl::StrCat("text ", path_, ": ", num_tokens(), " tokens (", num_files_,
                        num_files_ == 1 ? " file" : " files", ", ", tokenizer_,
                        eos_id_ >= 0 ? absl::StrCat(", EOS ", eos_id_, " after each") : "", ")");
  }

 private:
  std::string path_;
  int64_t num_files_;
  std::string tokenizer_;
  std::vector<int32_t> tokens_;
  int64_t eos_id_;
};

absl::StatusOr<std::unique_ptr<TokenDataset>> OpenTextDataset(const DatasetSpec& spec) {
  std::unique_ptr<Tokenizer> tokenizer;
  if (!spec.tokenizer_path.empty()) {
    RT_ASSIGN_OR_RETURN(tokenizer, Tokenizer::Load(spec.tokenizer_path));
    if (spec.vocab_size < tokenizer->vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("text ", spec.path, ": model.vocab_size = ", spec.vocab_size,
                       " is smaller than the ", tokenizer->vocab_size(), " ids of the tokenizer ",
                       spec.tokenizer_path, "; set model.vocab_size >= ", tokenizer->vocab_size()));
    }
  } else if (spec.vocab_size < kByteVocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "text ", spec.path, ": vocab_size = ", spec.vocab_size, " is too small; text datasets use ",
        "one token per byte and need vocab_size >= ", kByteVocab));
  }
  // Anything but a folder, a missing path included, is read as one file so that open(2) reports
  // the error.
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(spec.path, ec)) {
    RT_ASSIGN_OR_RETURN(files, ListTextFiles(spec.path));
  } else {
    files.push_back(spec.path);
  }
  const int64_t eos = tokenizer == nullptr ? -1
                      : spec.eos_id >= 0   ? spec.eos_id
                                           : tokenizer->end_of_text_id();
  if (eos >= spec.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("text ", spec.path, ": the EOS token ", eos,
                     " is not below model.vocab_size = ", spec.vocab_size));
  }
  std::string bytes;
  std::vector<int32_t> tokens;
  int64_t encoded = 0;  // tokens of the files themselves (no EOS)
  for (const fs::path& file : files) {
    RT_RETURN_IF_ERROR(AppendFile(file.string(), &bytes));
    if (tokenizer == nullptr) continue;
    const size_t before = tokens.size();
    tokenizer->Encode(bytes, &tokens);  // file by file: a pre-token never spans two files
    encoded += int64_t(tokens.size() - before);
    if (eos >= 0) tokens.push_back(static_cast<int32_t>(eos));  // one document per file
    bytes.clear();
  }
  if (tokenizer != nullptr) {
    if (encoded == 0) {
      return absl::InvalidArgumentError(absl::StrCat("text ", spec.path, ": no data (",
                                                     files.size(),
                                                     " non-hidden regular files, all empty); point "
                                                     "dataset.path at a non-empty file or folder"));
    }
    return std::make_unique<TokenizedTextDataset>(spec.path, static_cast<int64_t>(files.size()),
                                                  tokenizer->Describe(), std::move(tokens), eos);
  }
  if (bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "text ", spec.path, ": no data (", files.size(),
        " non-hidden regular files, all empty); point dataset.path at a non-empty file or folder"));
  }
  return std::make_unique<TextDataset>(spec.path, static_cast<int64_t>(files.size()),
                                       std::move(bytes));
}

// bin: a read-only mapping of the file, so a multi-GB corpus costs page cache, not heap.
// Immutable after construction; Read is thread-safe.
class BinDataset : public TokenDataset {
 public:
  BinDataset(std::string path, std::string dtype, const unsigned char* data, int64_t bytes,
             int token_bytes)
      : path_(std::move(path)),
        dtype_(std::move(dtype)),
        data_(data),
        bytes_(bytes),
        token_bytes_(token_bytes) {}
  BinDataset(const BinDataset&) = delete;
  BinDataset& operator=(const BinDataset&) = delete;
  ~BinDataset() override { munmap(const_cast<unsigned char*>(data_), static_cast<size_t>(bytes_)); }

  int64_t num_tokens() const override { return bytes_ / token_bytes_; }

  // Assembled byte by byte so the file is read as little-endian on any host; compilers turn this
  // into a plain load on little-endian machines.
  int64_t TokenAt(int64_t i) const {
    const unsigned char* p = data_ + i * token_bytes_;
    uint64_t v = 0;
    for (int b = token_bytes_ - 1; b >= 0; --b) v = (v << 8) | p[b];
    return static_cast<int64_t>(v);
  }

  void Read(int64_t begin, int64_t count, int64_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = TokenAt(begin + i);
  }

  std::string Describe() const override {
    return absl::StrCat("bin ", path_, ": ", num_tokens(), " tokens (", dtype_, ")");
  }

 private:
  std::string path_;
  std::string dtype_;
  const unsigned char* data_;
  int64_t bytes_;
  int token_bytes_;
};

absl::StatusOr<std::unique_ptr<TokenDataset>> OpenBinDataset(const DatasetSpec& spec) {
  const int token_bytes = spec.token_dtype == TokenDtype::kUint16 ? 2 : 4;
  std::unique_ptr<ScopedFd> fd;
  int64_t size = 0;
  RT_RETURN_IF_ERROR(OpenRegularFile("bin", spec.path, &fd, &size));
  if (size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("bin ", spec.path, ": file is empty"));
  }
  if (size % token_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bin ", spec.path, ": size ", size, " bytes is not a multiple of ",
                     token_bytes, " (token_dtype ", ChoiceName(spec.token_dtype),
                     ")\nHINT: the file may be truncated, or token_dtype may be wrong"));
  }
  void* map = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd->get(), 0);
  if (map == MAP_FAILED) {
    return absl::ErrnoToStatus(errno, absl::StrCat("bin ", spec.path, ": mmap"));
  }
  // The mapping keeps the file alive; the descriptor closes when `fd` goes out of scope.
  auto dataset =
      std::make_unique<BinDataset>(spec.path, ChoiceName(spec.token_dtype),
                                   static_cast<const unsigned char*>(map), size, token_bytes);

  // Check every token once here, so a wrong dtype or vocabulary fails at startup rather than as an
  // out-of-range embedding lookup mid-run.
  const int64_t n = dataset->num_tokens();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t token = dataset->TokenAt(i);
    if (token >= spec.vocab_size) {
      // Where, not what: an error never carries bytes of the file (it may not be the user's).
      return absl::InvalidArgumentError(
          absl::StrCat("bin ", spec.path, ": the token at token offset ", i, " (byte offset ",
                       i * token_bytes, ") is >= vocab_size ", spec.vocab_size,
                       "\nHINT: maybe token_dtype is wrong (it is \"", ChoiceName(spec.token_dtype),
                       "\"), or the file was tokenised for a different vocabulary"));
    }
  }
  return dataset;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenDataset>> OpenDataset(const DatasetSpec& spec) {
  if (spec.vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("dataset: vocab_size = ", spec.vocab_size,
                                                   " must be positive (the model's vocab_size)"));
  }
  if (spec.kind == DatasetKind::kSynthetic) return data_internal::OpenSyntheticDataset(spec);
  if (spec.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("dataset: kind \"", ChoiceName(spec.kind),
                                                   "\" needs a path, and path is empty"));
  }
  return spec.kind == DatasetKind::kText ? OpenTextDataset(spec) : OpenBinDataset(spec);
}

}  // namespace ringtrain
