// Private to serialize/: opening a torch.save zip archive and checking its records, shared by the
// whole-file reader (state_dict_io.cc) and the ranged one (torch_save_reader.cc).
//
// LibTorch builds miniz with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS, so PyTorchStreamReader returns
// whatever bytes sit where a record should be: a flipped bit, or a garbled header that shifts a
// record, would load silently. So records are checked against the CRC-32 stored in the zip's
// central directory, which is read here independently of miniz.
#ifndef RINGTRAIN_WORKER_ENGINE_SERIALIZE_ZIP_RECORDS_H_
#define RINGTRAIN_WORKER_ENGINE_SERIALIZE_ZIP_RECORDS_H_

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ringtrain {
namespace serialize_internal {

std::string ErrnoText(int err);

// `status` with "<path>: " before its message.
absl::Status WithPath(const absl::Status& status, const std::string& path);

class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&&) = delete;
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Opens `path` for reading and sets *size. Settles NOT_FOUND, permissions, a folder and the legacy
// (non-zip) torch.save format (INVALID_ARGUMENT with a hint) before PyTorchStreamReader, whose only
// answer to any of these is a c10::Error that reads like corruption.
absl::StatusOr<ScopedFd> OpenForReading(const std::string& path, uint64_t* size);

// The zip's CRC-32 of `size` bytes.
uint32_t Crc32(const void* data, size_t size);

struct ZipEntry {
  uint32_t crc = 0;
  uint16_t method = 0;  // 0: stored (torch.save's records), 8: deflated, ...
};

// The central directory: every entry by its full name ("<folder>/data/0").
struct ZipDirectory {
  std::string folder;  // every record's folder; PyTorchStreamReader takes the first entry's too
  std::unordered_map<std::string, ZipEntry> by_name;
};

// Reads the central directory: end record (zip64 when its fields are saturated), then entries.
// DATA_LOSS when any of it is missing or damaged.
absl::StatusOr<ZipDirectory> ReadZipDirectory(int fd, uint64_t file_size);

// OK when record `name` (relative to the folder, "data/0") is in the directory and `data` matches
// its CRC-32; DATA_LOSS naming the record otherwise.
absl::Status CheckCrc(const ZipDirectory& directory, const std::string& name, const void* data,
                      size_t size);

}  // namespace serialize_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_SERIALIZE_ZIP_RECORDS_H_
