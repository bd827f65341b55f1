// See zip_records.h.
#include "worker/engine/serialize/zip_records.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ringtrain {
namespace serialize_internal {

namespace {

// torch.save(..., _use_new_zipfile_serialization=False) starts with a pickled magic number:
// PROTO <n>, then LONG1 of the 10 bytes of 0x1950a86a20f9469cfc6c.
constexpr absl::string_view kLegacyMagic("\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 12);

}  // namespace

std::string ErrnoText(int err) { return std::strerror(err); }

absl::Status WithPath(const absl::Status& status, const std::string& path) {
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

absl::StatusOr<ScopedFd> OpenForReading(const std::string& path, uint64_t* size) {
  ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    std::string message = absl::StrCat("cannot open ", path, ": ", ErrnoText(err));
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
    return absl::UnavailableError(message);
  }
  struct stat info;
  if (fstat(fd.get(), &info) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot stat ", path, ": ", ErrnoText(errno)));
  }
  if (S_ISDIR(info.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, " is a folder"));
  *size = static_cast<uint64_t>(info.st_size);
  char head[2 + kLegacyMagic.size()];
  if (pread(fd.get(), head, sizeof(head), 0) == static_cast<ssize_t>(sizeof(head)) &&
      static_cast<uint8_t>(head[0]) == 0x80 &&
      absl::string_view(head + 2, kLegacyMagic.size()) == kLegacyMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        " was saved with torch.save(..., _use_new_zipfile_serialization=False), a legacy "
        "format this reader does not support. HINT: re-save it in Python with the default zip "
        "format: torch.save(torch.load(p), p)"));
  }
  return fd;
}

// Reflected polynomial 0xEDB88320, slice-by-8: checkpoints are large.
uint32_t Crc32(const void* data, size_t size) {
  static const auto* const kTables = [] {
    auto* t = new std::array<std::array<uint32_t, 256>, 8>;
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      (*t)[0][i] = c;
    }
    for (int k = 1; k < 8; ++k) {
      for (uint32_t i = 0; i < 256; ++i) {
        (*t)[k][i] = ((*t)[k - 1][i] >> 8) ^ (*t)[0][(*t)[k - 1][i] & 0xff];
      }
    }
    return t;
  }();
  const auto& t = *kTables;
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = ~0u;
  for (; size >= 8; p += 8, size -= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);  // little-endian host, as LibTorch's record layout already assumes
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; size > 0; ++p, --size) crc = t[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
  return ~crc;
}

namespace {

uint64_t Le(const std::string& bytes, size_t at, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= uint64_t{static_cast<uint8_t>(bytes[at + i])} << (8 * i);
  return v;
}

absl::StatusOr<std::string> ReadAt(int fd, uint64_t offset, uint64_t size, uint64_t file_size) {
  if (offset > file_size || size > file_size - offset) {
    return absl::DataLossError("the zip directory points past the end of the file");
  }
  std::string bytes(size, '\0');
  for (uint64_t done = 0; done < size;) {
    const ssize_t n = pread(fd, &bytes[done], size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::DataLossError("cannot read the zip directory");
    done += static_cast<uint64_t>(n);
  }
  return bytes;
}

}  // namespace

absl::StatusOr<ZipDirectory> ReadZipDirectory(int fd, uint64_t file_size) {
  constexpr uint64_t kEndSize = 22, kMaxComment = 65535;
  const uint64_t tail_size = std::min(file_size, kEndSize + kMaxComment);
  RT_ASSIGN_OR_RETURN(std::string tail, ReadAt(fd, file_size - tail_size, tail_size, file_size));
  size_t end = std::string::npos;
  for (size_t i = tail.size() >= kEndSize ? tail.size() - kEndSize + 1 : 0; i-- > 0;) {
    if (Le(tail, i, 4) == 0x06054b50) {
      end = i;
      break;
    }
  }
  if (end == std::string::npos) return absl::DataLossError("no zip end-of-directory record");
  uint64_t entries = Le(tail, end + 10, 2), size = Le(tail, end + 12, 4);
  uint64_t offset = Le(tail, end + 16, 4);
  if (entries == 0xffff || size == 0xffffffff || offset == 0xffffffff) {
    if (end < 20 || Le(tail, end - 20, 4) != 0x07064b50) {
      return absl::DataLossError("the zip64 end-of-directory locator is missing");
    }
    RT_ASSIGN_OR_RETURN(std::string end64, ReadAt(fd, Le(tail, end - 12, 8), 56, file_size));
    if (Le(end64, 0, 4) != 0x06064b50) return absl::DataLossError("bad zip64 end record");
    entries = Le(end64, 32, 8);
    size = Le(end64, 40, 8);
    offset = Le(end64, 48, 8);
  }
  RT_ASSIGN_OR_RETURN(std::string dir, ReadAt(fd, offset, size, file_size));
  ZipDirectory crcs;
  size_t at = 0;
  for (uint64_t i = 0; i < entries; ++i) {
    const bool fits = dir.size() - at >= 46 && Le(dir, at, 4) == 0x02014b50;
    const size_t name_size = fits ? Le(dir, at + 28, 2) : 0;
    const size_t entry_size = fits ? 46 + name_size + Le(dir, at + 30, 2) + Le(dir, at + 32, 2) : 0;
    if (!fits || dir.size() - at < entry_size) {
      return absl::DataLossError(absl::StrCat("zip directory entry #", i, " is damaged"));
    }
    std::string name = dir.substr(at + 46, name_size);
    if (i == 0) crcs.folder = name.substr(0, name.find('/'));
    crcs.by_name.emplace(std::move(name), ZipEntry{static_cast<uint32_t>(Le(dir, at + 16, 4)),
                                                   static_cast<uint16_t>(Le(dir, at + 10, 2))});
    at += entry_size;
  }
  return crcs;
}

absl::Status CheckCrc(const ZipDirectory& crcs, const std::string& name, const void* data,
                      size_t size) {
  auto it = crcs.by_name.find(absl::StrCat(crcs.folder, "/", name));
  if (it == crcs.by_name.end()) {
    return absl::DataLossError(absl::StrCat("record '", name, "' is not in the zip directory"));
  }
  const uint32_t actual = Crc32(data, size);
  if (actual != it->second.crc) {
    return absl::DataLossError(absl::StrCat("record '", name, "' fails its CRC-32 check (stored ",
                                            absl::Hex(it->second.crc), ", read ", absl::Hex(actual),
                                            "): the file is corrupt"));
  }
  return absl::OkStatus();
}

absl::StatusOr<OpenedArchive> OpenArchive(const std::string& path) {
  uint64_t file_size = 0;
  RT_ASSIGN_OR_RETURN(ScopedFd fd, OpenForReading(path, &file_size));
  OpenedArchive archive{std::move(fd), file_size};
  try {
    archive.reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const c10::Error& e) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a readable torch.save zip archive (truncated or corrupt): ",
                     e.what_without_backtrace()));
  }
  absl::StatusOr<ZipDirectory> directory = ReadZipDirectory(archive.fd.get(), archive.file_size);
  if (!directory.ok()) return WithPath(directory.status(), path);
  archive.directory = *std::move(directory);
  return archive;
}

}  // namespace serialize_internal
}  // namespace ringtrain
