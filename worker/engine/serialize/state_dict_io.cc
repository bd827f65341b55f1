// Reading opens the zip with LibTorch's PyTorchStreamReader, checks each record it uses against the
// zip's CRC-32, and hands data.pkl to the strict unpickler in pickle_reader.cc. Writing uses
// LibTorch's own Pickler and PyTorchStreamWriter, combined exactly as torch::pickle_save combines
// them (so Python's torch.load reads the file as a plain dict), but streamed into the file: a large
// checkpoint is never held twice in memory.
#include "worker/engine/serialize/state_dict_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "worker/engine/serialize/pickle_reader.h"

namespace ringtrain {
namespace {

using caffe2::serialize::PyTorchStreamReader;
using caffe2::serialize::PyTorchStreamWriter;

// torch.save(..., _use_new_zipfile_serialization=False) starts with a pickled magic number:
// PROTO <n>, then LONG1 of the 10 bytes of 0x1950a86a20f9469cfc6c.
constexpr absl::string_view kLegacyMagic("\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 12);

std::string ErrnoText(int err) { return std::strerror(err); }

absl::Status WithPath(const absl::Status& status, const std::string& path) {
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

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

// Settles NOT_FOUND, permissions and the legacy format before PyTorchStreamReader, whose only
// answer to any of these is a c10::Error that reads like corruption.
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

// --- Record integrity ---------------------------------------------------------------------------
// LibTorch builds miniz with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS, so PyTorchStreamReader returns
// whatever bytes sit where a record should be: a flipped bit, or a garbled header that shifts a
// record, would load silently. So every record used is checked against the CRC-32 stored in the
// zip's central directory, which is read here independently of miniz.

// zip's CRC-32 (reflected polynomial 0xEDB88320), slice-by-8: checkpoints are large.
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

struct ZipCrcs {
  std::string folder;  // every record's folder; PyTorchStreamReader takes the first entry's too
  std::unordered_map<std::string, uint32_t> by_name;
};

// Reads the central directory: end record (zip64 when its fields are saturated), then entries.
absl::StatusOr<ZipCrcs> ReadZipCrcs(int fd, uint64_t file_size) {
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
  ZipCrcs crcs;
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
    crcs.by_name.emplace(std::move(name), static_cast<uint32_t>(Le(dir, at + 16, 4)));
    at += entry_size;
  }
  return crcs;
}

absl::Status CheckCrc(const ZipCrcs& crcs, const std::string& name, const void* data, size_t size) {
  auto it = crcs.by_name.find(absl::StrCat(crcs.folder, "/", name));
  if (it == crcs.by_name.end()) {
    return absl::DataLossError(absl::StrCat("record '", name, "' is not in the zip directory"));
  }
  const uint32_t actual = Crc32(data, size);
  if (actual != it->second) {
    return absl::DataLossError(absl::StrCat("record '", name, "' fails its CRC-32 check (stored ",
                                            absl::Hex(it->second), ", read ", absl::Hex(actual),
                                            "): the file is corrupt"));
  }
  return absl::OkStatus();
}

// --- Reading ------------------------------------------------------------------------------------

std::string RecordText(PyTorchStreamReader& reader, const std::string& name) {
  auto [data, size] = reader.getRecord(name);
  return std::string(static_cast<const char*>(data.get()), size);
}

absl::StatusOr<StateDict> ReadOpenedArchive(PyTorchStreamReader& reader, const ZipCrcs& crcs) {
  // Written by newer PyTorch; absent means the writer's (little-endian) order.
  if (reader.hasRecord("byteorder") && RecordText(reader, "byteorder") == "big") {
    return absl::InvalidArgumentError("the tensors were saved in big-endian byte order");
  }
  if (!reader.hasRecord("data.pkl")) return absl::DataLossError("the archive has no data.pkl");
  auto [pickle, pickle_size] = reader.getRecord("data.pkl");
  RT_RETURN_IF_ERROR(CheckCrc(crcs, "data.pkl", pickle.get(), pickle_size));
  serialize_internal::StorageLoader load =
      [&reader,
       &crcs](const std::string& key) -> absl::StatusOr<serialize_internal::StorageRecord> {
    const std::string name = absl::StrCat("data/", key);
    try {
      if (!reader.hasRecord(name)) {
        return absl::DataLossError(absl::StrCat("the archive has no record '", name, "'"));
      }
      auto [data, size] = reader.getRecord(name);
      RT_RETURN_IF_ERROR(CheckCrc(crcs, name, data.get(), size));
      return serialize_internal::StorageRecord{c10::Storage(c10::Storage::use_byte_size_t(), size,
                                                            std::move(data), /*allocator=*/nullptr,
                                                            /*resizable=*/false),
                                               name};
    } catch (const c10::Error& e) {
      return absl::DataLossError(
          absl::StrCat("cannot read record '", name, "': ", e.what_without_backtrace()));
    }
  };
  return serialize_internal::UnpickleStateDict(
      absl::string_view(static_cast<const char*>(pickle.get()), pickle_size), load);
}

// --- Writing ------------------------------------------------------------------------------------

// The Pickler records a tensor by its whole storage, so views are copied down to their own
// elements first; detach() keeps requires_grad out of the file, as in model.state_dict().
at::Tensor ForWriting(const at::Tensor& tensor) {
  at::Tensor t = tensor.detach().resolve_conj().resolve_neg();
  if (!t.device().is_cpu()) t = t.to(at::kCPU);
  if (!t.is_contiguous() || t.storage_offset() != 0 ||
      t.storage().nbytes() != static_cast<size_t>(t.numel()) * t.element_size()) {
    t = t.clone(at::MemoryFormat::Contiguous);
  }
  return t;
}

// Writes the zip through `sink`. PyTorchStreamWriter finishes an unfinished archive in its
// destructor, where a throw means std::terminate; so on failure the writer is deliberately leaked.
absl::Status WriteArchive(const std::string& pickle, const std::vector<at::Tensor>& tensors,
                          const std::function<size_t(const void*, size_t)>& sink) {
  std::unique_ptr<PyTorchStreamWriter> writer;
  try {
    writer = std::make_unique<PyTorchStreamWriter>(sink);
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), tensors, *writer);
    writer->writeEndOfFile();
  } catch (const c10::Error& e) {
    (void)writer.release();
    return absl::InternalError(e.what_without_backtrace());
  }
  return absl::OkStatus();
}

// Makes the rename itself durable. Best effort: by now the file is complete under its final name,
// and reporting an error here would suggest otherwise.
void SyncParentDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

}  // namespace

absl::StatusOr<StateDict> ReadStateDict(const std::string& path) {
  uint64_t file_size = 0;
  RT_ASSIGN_OR_RETURN(ScopedFd fd, OpenForReading(path, &file_size));
  try {
    std::unique_ptr<PyTorchStreamReader> reader;
    try {
      reader = std::make_unique<PyTorchStreamReader>(path);
    } catch (const c10::Error& e) {
      return absl::DataLossError(
          absl::StrCat(path, ": not a readable torch.save zip archive (truncated or corrupt): ",
                       e.what_without_backtrace()));
    }
    absl::StatusOr<ZipCrcs> crcs = ReadZipCrcs(fd.get(), file_size);
    if (!crcs.ok()) return WithPath(crcs.status(), path);
    absl::StatusOr<StateDict> dict = ReadOpenedArchive(*reader, *crcs);
    if (!dict.ok()) return WithPath(dict.status(), path);
    return dict;
  } catch (const c10::Error& e) {
    return absl::DataLossError(absl::StrCat(path, ": ", e.what_without_backtrace()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(path, ": out of memory while reading"));
  } catch (const std::exception& e) {
    // e.g. std::stoull on a garbled `version` record inside PyTorchStreamReader.
    return absl::DataLossError(absl::StrCat(path, ": ", e.what()));
  }
}

absl::Status WriteStateDict(const std::string& path, const StateDict& dict) {
  std::string pickle;
  std::vector<at::Tensor> tensors;
  try {
    c10::Dict<std::string, at::Tensor> entries;
    for (const auto& [name, tensor] : dict) {
      std::string problem;
      if (!tensor.defined()) {
        problem = "is undefined";
      } else if (tensor.layout() != at::kStrided || tensor.is_quantized()) {
        problem = "is sparse or quantized; only dense tensors can be written";
      } else if (entries.contains(name)) {
        problem = "appears twice";
      }
      if (!problem.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot write ", path, ": tensor '", name, "' ", problem));
      }
      entries.insert(name, ForWriting(tensor));
    }
    // tag_aggregates = false: a plain dict, as torch.save writes one. With tags the dict is wrapped
    // in torch.jit._pickle.restore_type_tag, which PyTorch 2.x's torch.load (weights_only=True,
    // the default since 2.6) refuses to call.
    torch::jit::Pickler pickler([&pickle](const char* data, size_t n) { pickle.append(data, n); },
                                /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
                                /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
                                /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(c10::IValue(entries));
    pickler.stop();
    tensors = pickler.tensorData();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", e.what_without_backtrace()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot write ", path, ": out of memory"));
  }

  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot create ", tmp, ": ", ErrnoText(errno)));
  }
  auto discard = [&] {
    if (fd >= 0) close(fd);
    fd = -1;
    unlink(tmp.c_str());
  };
  auto fail = [&](absl::string_view what, int err) {
    discard();
    return absl::UnavailableError(absl::StrCat("cannot ", what, " ", tmp, ": ", ErrnoText(err)));
  };
  int write_errno = 0;
  // Always reports the whole buffer written (see WriteArchive); the first error is kept instead.
  auto sink = [&](const void* data, size_t n) -> size_t {
    const char* p = static_cast<const char*>(data);
    for (size_t left = n; left > 0 && write_errno == 0;) {
      const ssize_t written = write(fd, p, left);
      if (written < 0) {
        if (errno != EINTR) write_errno = errno;
        continue;
      }
      p += written;
      left -= static_cast<size_t>(written);
    }
    return n;
  };
  absl::Status archived = WriteArchive(pickle, tensors, sink);
  if (!archived.ok()) {
    discard();
    return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", archived.message()));
  }
  if (write_errno != 0) return fail("write", write_errno);
  if (fsync(fd) != 0) return fail("fsync", errno);
  const int closed = close(fd);
  fd = -1;
  if (closed != 0) return fail("close", errno);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", ErrnoText(err)));
  }
  SyncParentDirectory(path);
  return absl::OkStatus();
}

}  // namespace ringtrain
