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
#include "worker/engine/serialize/zip_records.h"

namespace ringtrain {
namespace {

using caffe2::serialize::PyTorchStreamReader;
using caffe2::serialize::PyTorchStreamWriter;
using serialize_internal::CheckCrc;
using serialize_internal::ErrnoText;
using serialize_internal::ZipDirectory;

// --- Reading ------------------------------------------------------------------------------------

std::string RecordText(PyTorchStreamReader& reader, const std::string& name) {
  auto [data, size] = reader.getRecord(name);
  return std::string(static_cast<const char*>(data.get()), size);
}

absl::StatusOr<StateDict> ReadOpenedArchive(PyTorchStreamReader& reader, const ZipDirectory& crcs) {
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
  return serialize_internal::ReadArchive<StateDict>(
      path, [](serialize_internal::OpenedArchive& archive) {
        return ReadOpenedArchive(*archive.reader, archive.directory);
      });
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
