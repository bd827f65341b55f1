// FuzzPickle and FuzzStateDict: the torch.save reader (worker/engine/serialize), which reads the
// files users hand the trainer (checkpoint.initial_load_path) and the checkpoints it resumes from.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_targets.h"
#include "worker/engine/serialize/pickle_reader.h"
#include "worker/engine/serialize/state_dict_io.h"
#include "worker/engine/serialize/torch_save_reader.h"

namespace ringtrain::fuzz {
namespace {

constexpr size_t kRecordBytes = 256;

// What the reader promises of every dict it returns: contiguous CPU tensors without grad, each
// owning exactly its own memory. Reads every byte, so a view past its storage shows up under ASan.
std::string CheckStateDict(const StateDict& dict) {
  std::set<const void*> storages;
  for (const auto& [name, tensor] : dict) {
    const std::string where = absl::StrCat("tensor '", absl::CEscape(name), "'");
    if (!tensor.defined()) return absl::StrCat(where, " is undefined");
    if (!tensor.device().is_cpu() || !tensor.is_contiguous() || tensor.requires_grad() ||
        tensor.storage_offset() != 0) {
      return absl::StrCat(where, " is not a contiguous CPU tensor at offset 0 without grad");
    }
    const size_t bytes = static_cast<size_t>(tensor.numel()) * tensor.element_size();
    if (tensor.storage().nbytes() != bytes) {
      return absl::StrCat(where, " has ", bytes, " bytes in a storage of ",
                          tensor.storage().nbytes());
    }
    if (bytes == 0) continue;
    if (!storages.insert(tensor.storage().unsafeGetStorageImpl()).second) {
      return absl::StrCat(where, " shares its storage with another entry");
    }
    const auto* p = static_cast<const volatile uint8_t*>(tensor.data_ptr());
    uint8_t sum = 0;
    for (size_t i = 0; i < bytes; ++i) sum += p[i];
    (void)sum;
  }
  return "";
}

absl::StatusOr<serialize_internal::StorageRecord> FixedRecord(const std::string& key) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), kRecordBytes, c10::GetCPUAllocator(),
                       /*resizable=*/false);
  std::memset(storage.mutable_data(), 0x3c, kRecordBytes);
  return serialize_internal::StorageRecord{std::move(storage), absl::StrCat("data/", key)};
}

// The ranged reader on the same file: every floating tensor (up to a size) reads without a crash
// and, when the whole read succeeded too, gives its elements bit for bit.
std::string CheckRangedReads(const StateReader& reader, const absl::StatusOr<StateDict>& whole) {
  for (const auto& [name, stored] : reader.tensors()) {
    if (!stored.floating) continue;
    int64_t numel = 1;
    bool small = true;
    for (int64_t d : stored.shape) {
      small = small && !__builtin_mul_overflow(numel, d, &numel) && numel <= (int64_t{1} << 16);
    }
    if (!small || numel == 0) continue;
    at::Tensor out = at::empty({numel}, at::kDouble);
    const absl::Status read = reader.Read(name, 0, numel, out);
    if (!read.ok() || !whole.ok()) continue;
    const at::Tensor* last = nullptr;  // a name set twice keeps its last value, as in Python
    for (const auto& [whole_name, tensor] : *whole) {
      if (whole_name == name) last = &tensor;
    }
    if (last == nullptr) return absl::StrCat("tensor '", absl::CEscape(name), "' only in one read");
    const at::Tensor want = last->reshape(-1).to(at::kDouble);
    if (std::memcmp(want.data_ptr(), out.data_ptr(), out.nbytes()) != 0) {
      return absl::StrCat("tensor '", absl::CEscape(name),
                          "': the ranged read differs from the whole read");
    }
  }
  return "";
}

}  // namespace

std::string FuzzPickle(const uint8_t* data, size_t size) {
  const absl::StatusOr<StateDict> dict = serialize_internal::UnpickleStateDict(
      absl::string_view(reinterpret_cast<const char*>(data), size), FixedRecord);
  if (!dict.ok()) return "";
  return CheckStateDict(*dict);
}

std::string FuzzStateDict(const uint8_t* data, size_t size) {
  // A file without a disk: ReadStateDict and LibTorch's reader both open it by this path.
  const int fd = memfd_create("fuzz.pt", MFD_CLOEXEC);
  if (fd < 0) return absl::StrCat("memfd_create failed: ", std::strerror(errno));
  for (size_t done = 0; done < size;) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) {
      close(fd);
      return absl::StrCat("cannot write the input to a memfd: ", std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  const absl::StatusOr<StateDict> dict = ReadStateDict(path);
  const absl::StatusOr<std::unique_ptr<StateReader>> ranged = OpenTorchSaveReader(path);
  std::string problem = dict.ok() ? CheckStateDict(*dict) : "";
  if (problem.empty() && ranged.ok()) problem = CheckRangedReads(**ranged, dict);
  close(fd);
  return problem;
}

}  // namespace ringtrain::fuzz
