#include "worker/engine/serialize/torch_save_reader.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <caffe2/serialize/inline_container.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/serialize/pickle_reader.h"
#include "worker/engine/serialize/state_dict_io.h"
#include "worker/engine/serialize/zip_records.h"

namespace ringtrain {
namespace {

using caffe2::serialize::PyTorchStreamReader;
using serialize_internal::CheckCrc;
using serialize_internal::ErrnoText;
using serialize_internal::OpenedArchive;
using serialize_internal::ScopedFd;
using serialize_internal::StorageRecord;
using serialize_internal::WithPath;
using serialize_internal::ZipDirectory;

struct Record {
  std::string name;     // "data/<key>"
  uint64_t offset = 0;  // its first byte in the file
  uint64_t size = 0;
};

struct Entry {
  at::Tensor view;  // on the meta device: the tensor's geometry over its storage
  Record record;    // empty name for a tensor without elements
};

class TorchSaveReader : public StateReader {
 public:
  TorchSaveReader(std::string path, ScopedFd fd, ZipDirectory directory,
                  std::map<std::string, Entry> entries)
      : path_(std::move(path)),
        fd_(std::move(fd)),
        directory_(std::move(directory)),
        entries_(std::move(entries)) {
    for (const auto& [name, entry] : entries_) {
      tensors_[name] =
          StoredTensor{entry.view.sizes().vec(), c10::toString(entry.view.scalar_type()),
                       entry.view.is_floating_point()};
    }
  }

  const std::string& source() const override { return path_; }
  const std::map<std::string, StoredTensor>& tensors() const override { return tensors_; }

  absl::Status Read(const std::string& name, int64_t begin, int64_t end,
                    const at::Tensor& out) const override {
    const auto it = entries_.find(name);
    if (it == entries_.end()) {
      return absl::NotFoundError(absl::StrCat(path_, " holds no tensor '", name, "'"));
    }
    const at::Tensor& view = it->second.view;
    const Record& record = it->second.record;
    const int64_t numel = view.numel();
    if (begin < 0 || begin > end || end > numel || out.numel() != end - begin) {
      return absl::InvalidArgumentError(absl::StrCat("elements [", begin, ", ", end, ") of '", name,
                                                     "' (", numel, " elements) into ",
                                                     out.numel()));
    }
    if (begin == end) return absl::OkStatus();
    const int64_t item = view.element_size();
    const auto stored_options = at::TensorOptions().dtype(view.scalar_type());
    at::Tensor stored;
    if (view.is_contiguous()) {
      // Straight into `out` when it is what the file holds: no buffer.
      const bool direct =
          out.scalar_type() == view.scalar_type() && out.is_contiguous() && out.device().is_cpu();
      stored = direct ? out : at::empty({end - begin}, stored_options);
      const uint64_t first = record.offset + uint64_t(view.storage_offset() + begin) * item;
      RT_RETURN_IF_ERROR(ReadBytes(first, stored.nbytes(), stored.data_ptr(), record.name));
      if (view.storage_offset() == 0 && begin == 0 && end == numel &&
          stored.nbytes() == record.size) {
        RT_RETURN_IF_ERROR(
            WithPath(CheckCrc(directory_, record.name, stored.data_ptr(), stored.nbytes()), path_));
      }
    } else {
      // Strided over its storage: the whole record, then the view's elements.
      at::Tensor whole = at::empty({int64_t(record.size) / item}, stored_options);
      RT_RETURN_IF_ERROR(ReadBytes(record.offset, whole.nbytes(), whole.data_ptr(), record.name));
      if (whole.nbytes() == record.size) {
        RT_RETURN_IF_ERROR(
            WithPath(CheckCrc(directory_, record.name, whole.data_ptr(), whole.nbytes()), path_));
      }
      stored = whole.as_strided(view.sizes(), view.strides(), view.storage_offset())
                   .reshape(-1)
                   .narrow(0, begin, end - begin);
    }
    c10::AutoGradMode no_grad(false);
    if (!stored.is_same(out)) out.copy_(stored);
    return absl::OkStatus();
  }

 private:
  absl::Status ReadBytes(uint64_t offset, uint64_t size, void* out,
                         const std::string& record) const {
    auto* p = static_cast<char*>(out);
    for (uint64_t done = 0; done < size;) {
      const ssize_t n = pread(fd_.get(), p + done, size - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::DataLossError(absl::StrCat(path_, ": cannot read record '", record, "': ",
                                                n < 0 ? ErrnoText(errno) : "the file ends early"));
      }
      done += static_cast<uint64_t>(n);
    }
    bytes_read_ += size;
    return absl::OkStatus();
  }

  std::string path_;
  ScopedFd fd_;
  ZipDirectory directory_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, StoredTensor> tensors_;
};

// data.pkl's tensors as meta views of meta storages, each storage's record located in the file.
absl::StatusOr<std::map<std::string, Entry>> ReadEntries(PyTorchStreamReader& reader,
                                                         const ZipDirectory& directory,
                                                         uint64_t file_size) {
  if (reader.hasRecord("byteorder")) {
    auto [data, size] = reader.getRecord("byteorder");
    if (std::string(static_cast<const char*>(data.get()), size) == "big") {
      return absl::InvalidArgumentError("the tensors were saved in big-endian byte order");
    }
  }
  if (!reader.hasRecord("data.pkl")) return absl::DataLossError("the archive has no data.pkl");
  auto [pickle, pickle_size] = reader.getRecord("data.pkl");
  RT_RETURN_IF_ERROR(CheckCrc(directory, "data.pkl", pickle.get(), pickle_size));
  std::unordered_map<const c10::StorageImpl*, Record> records;
  serialize_internal::StorageLoader locate =
      [&](const std::string& key) -> absl::StatusOr<StorageRecord> {
    Record record{absl::StrCat("data/", key)};
    try {
      if (!reader.hasRecord(record.name)) {
        return absl::DataLossError(absl::StrCat("the archive has no record '", record.name, "'"));
      }
      record.size = reader.getRecordSize(record.name);
      record.offset = reader.getRecordOffset(record.name);
    } catch (const c10::Error& e) {
      return absl::DataLossError(
          absl::StrCat("cannot locate record '", record.name, "': ", e.what_without_backtrace()));
    }
    if (record.offset > file_size || record.size > file_size - record.offset) {
      return absl::DataLossError(
          absl::StrCat("record '", record.name, "' reaches past the end of the file"));
    }
    c10::Storage storage =
        at::empty({int64_t(record.size)}, at::TensorOptions().dtype(at::kByte).device(at::kMeta))
            .storage();
    records[storage.unsafeGetStorageImpl()] = record;
    return StorageRecord{std::move(storage), record.name};
  };
  RT_ASSIGN_OR_RETURN(
      StateDict views,
      serialize_internal::UnpickleStateDictViews(
          absl::string_view(static_cast<const char*>(pickle.get()), pickle_size), locate));
  std::map<std::string, Entry> entries;
  for (auto& [name, view] : views) {
    Entry entry{view};
    if (view.numel() > 0) entry.record = records.at(view.storage().unsafeGetStorageImpl());
    entries[name] = std::move(entry);
  }
  return entries;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateReader>> OpenTorchSaveReader(const std::string& path) {
  RT_ASSIGN_OR_RETURN(
      std::unique_ptr<StateReader> reader,
      serialize_internal::ReadArchive<std::unique_ptr<StateReader>>(
          path, [&path](OpenedArchive& archive) -> absl::StatusOr<std::unique_ptr<StateReader>> {
            for (const auto& [name, entry] : archive.directory.by_name) {
              if (entry.method != 0) return nullptr;  // compressed: no byte ranges to read
            }
            RT_ASSIGN_OR_RETURN(auto entries,
                                ReadEntries(*archive.reader, archive.directory, archive.file_size));
            return std::make_unique<TorchSaveReader>(
                path, std::move(archive.fd), std::move(archive.directory), std::move(entries));
          }));
  if (reader != nullptr) return reader;
  // The whole file, as ReadStateDict reads it.
  RT_ASSIGN_OR_RETURN(StateDict dict, ReadStateDict(path));
  return std::make_unique<DictStateReader>(
      path, std::vector<std::pair<std::string, StateDict>>{{"", std::move(dict)}});
}

}  // namespace ringtrain
