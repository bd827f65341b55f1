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
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

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

// A torch.save archive open for reading: LibTorch's reader, and the zip directory read on its own.
struct OpenedArchive {
  ScopedFd fd;
  uint64_t file_size = 0;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  ZipDirectory directory;
};

// OpenForReading's errors; DATA_LOSS naming `path` when LibTorch's reader or the directory refuses
// the file. May throw what PyTorchStreamReader throws (ReadArchive catches it).
absl::StatusOr<OpenedArchive> OpenArchive(const std::string& path);

// Opens `path` and runs `read` on it: `read`'s errors get "<path>: " in front, and what LibTorch
// throws becomes DATA_LOSS (RESOURCE_EXHAUSTED for memory) naming the file.
template <typename T>
absl::StatusOr<T> ReadArchive(const std::string& path,
                              const std::function<absl::StatusOr<T>(OpenedArchive&)>& read) {
  try {
    absl::StatusOr<OpenedArchive> archive = OpenArchive(path);
    if (!archive.ok()) return archive.status();
    absl::StatusOr<T> result = read(*archive);
    if (!result.ok()) return WithPath(result.status(), path);
    return result;
  } catch (const c10::Error& e) {
    return absl::DataLossError(absl::StrCat(path, ": ", e.what_without_backtrace()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(path, ": out of memory while reading"));
  } catch (const std::exception& e) {
    // e.g. std::stoull on a garbled `version` record inside PyTorchStreamReader.
    return absl::DataLossError(absl::StrCat(path, ": ", e.what()));
  }
}

}  // namespace serialize_internal
}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_SERIALIZE_ZIP_RECORDS_H_
