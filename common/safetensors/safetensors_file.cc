// SafetensorsFile (reading one tensor at a time with pread) and WriteSafetensors.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/safetensors/safetensors.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace {

// Reads `size` bytes at `offset`; the count read, fewer only at the end of the file.
absl::StatusOr<uint64_t> PreadFully(int fd, void* out, uint64_t size, uint64_t offset,
                                    const std::string& path) {
  char* dst = static_cast<char*>(out);
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, dst + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  return done;
}

absl::Status WriteFully(int fd, const void* data, uint64_t size, const std::string& path) {
  const char* src = static_cast<const char*>(data);
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, src + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

SafetensorsFile::SafetensorsFile(std::string path, int fd, SafetensorsHeader header)
    : path_(std::move(path)), fd_(fd), header_(std::move(header)) {}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      header_(std::move(other.header_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    header_ = std::move(other.header_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such safetensors file"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  }
  // Owns fd from here, so every early return closes it.
  SafetensorsFile file(path, fd, SafetensorsHeader{});
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", path));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  // The length first: ParseSafetensorsHeader checks it against the cap and the file's size before
  // anything as large as it claims is allocated.
  std::string bytes(8, '\0');
  RT_ASSIGN_OR_RETURN(const uint64_t got, PreadFully(fd, bytes.data(), 8, 0, path));
  bytes.resize(got);
  uint64_t length = 0;
  if (got == 8) std::memcpy(&length, bytes.data(), 8);
  if (got == 8 && length <= kMaxSafetensorsHeaderBytes && length <= file_size - 8) {
    bytes.resize(8 + length);
    RT_ASSIGN_OR_RETURN(const uint64_t header_got,
                        PreadFully(fd, bytes.data() + 8, length, 8, path));
    bytes.resize(8 + header_got);
  }
  RT_ASSIGN_OR_RETURN(file.header_, ParseSafetensorsHeader(bytes, file_size, path));
  return file;
}

absl::Status SafetensorsFile::Read(const TensorEntry& entry, void* out) const {
  if (entry.end < entry.begin) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", entry.name, "' ends before it begins"));
  }
  return ReadRange(entry, 0, entry.end - entry.begin, out);
}

absl::Status SafetensorsFile::ReadRange(const TensorEntry& entry, uint64_t offset, uint64_t bytes,
                                        void* out) const {
  if (entry.end < entry.begin || offset > entry.end - entry.begin ||
      bytes > entry.end - entry.begin - offset) {
    return absl::InvalidArgumentError(absl::StrCat("bytes [", offset, ", ", offset + bytes,
                                                   ") are not inside tensor '", entry.name, "' (",
                                                   entry.end - entry.begin, " bytes)"));
  }
  const uint64_t start = header_.data_start + entry.begin + offset;
  RT_ASSIGN_OR_RETURN(const uint64_t got, PreadFully(fd_, out, bytes, start, path_));
  if (got != bytes) {
    return absl::DataLossError(absl::StrCat(path_, ": tensor '", entry.name, "' needs bytes up to ",
                                            start + bytes, " but the file ends at ", start + got,
                                            " (truncated since it was opened?)"));
  }
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  RT_ASSIGN_OR_RETURN(const std::string header, SerializeSafetensorsHeader(tensors, metadata));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", path));
  absl::Status status = WriteFully(fd, header.data(), header.size(), path);
  for (size_t i = 0; i < tensors.size() && status.ok(); ++i) {
    status = WriteFully(fd, tensors[i].data, tensors[i].bytes, path);
  }
  if (status.ok() && ::fsync(fd) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot fsync ", path));
  }
  if (::close(fd) != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot close ", path));
  }
  return status;
}

}  // namespace ringtrain
