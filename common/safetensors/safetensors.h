// The safetensors format (Hugging Face's weight files), torch-free: an 8-byte little-endian header
// length, that many bytes of JSON naming each tensor's dtype, shape and byte range, then the
// tensors' raw little-endian bytes, back to back. Our own small reader and writer (nlohmann parses
// the JSON) with the checks of the Rust crate that Python's `safetensors` is: a file that crate
// refuses is refused here too, as DATA_LOSS naming the file and what is wrong.
#ifndef RINGTRAIN_COMMON_SAFETENSORS_SAFETENSORS_H_
#define RINGTRAIN_COMMON_SAFETENSORS_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

// The dtypes ringtrain reads and writes. A file holding any other (F64, I64, U8, BOOL, F8_E4M3, …)
// is refused when opened, naming the tensor.
enum class TensorDtype { kF32, kBF16, kF16 };

absl::string_view TensorDtypeName(TensorDtype dtype);  // "F32", "BF16", "F16" (the file's spelling)
uint64_t TensorDtypeSize(TensorDtype dtype);           // bytes per element: 4, 2, 2

struct TensorEntry {
  std::string name;
  TensorDtype dtype;
  std::vector<int64_t> shape;  // each >= 0; {} is a scalar (one element)
  uint64_t begin = 0;          // byte range [begin, end) relative to the data section's start
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  // sorted by begin; they tile the data section without holes
  std::map<std::string, std::string> metadata;  // "__metadata__" (e.g. {"format": "pt"})
  uint64_t data_start = 0;                      // 8 + the header's length: where the data begins
};

// The largest header accepted (the Rust crate's MAX_HEADER_SIZE), so a corrupt length cannot make a
// reader allocate gigabytes.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses and validates a header. `bytes` holds at least the file's first 8 + header-length bytes
// (more is ignored); `file_size` is the whole file's size, which the tensors must fill exactly;
// `source` names the file in errors. DATA_LOSS for anything malformed, truncated or inconsistent
// (lengths, JSON, types, offsets, overlaps, holes, duplicate names, element-count overflow);
// INVALID_ARGUMENT for a well-formed tensor of a dtype ringtrain does not read.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view bytes,
                                                         uint64_t file_size,
                                                         const std::string& source);

// An open safetensors file: the header is read and checked by Open, each tensor's bytes only when
// asked (files are many GiB). Movable, not copyable; Read is const and safe to call from several
// threads at once (pread on one descriptor).
class SafetensorsFile {
 public:
  // NOT_FOUND when `path` does not exist; DATA_LOSS as ParseSafetensorsHeader, or when the file is
  // shorter than its header says.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const SafetensorsHeader& header() const { return header_; }
  const std::string& path() const { return path_; }

  // Copies the bytes of `entry` (one of header().tensors) into `out`, which must hold
  // entry.end - entry.begin bytes; they are little-endian, as in the file. DATA_LOSS when the file
  // ends early (it was truncated after Open).
  absl::Status Read(const TensorEntry& entry, void* out) const;
  // Copies `bytes` bytes of `entry` starting `offset` bytes into it (a slice of the tensor's
  // row-major data) into `out`. INVALID_ARGUMENT when the range leaves the tensor; DATA_LOSS as
  // Read.
  absl::Status ReadRange(const TensorEntry& entry, uint64_t offset, uint64_t bytes,
                         void* out) const;

 private:
  SafetensorsFile(std::string path, int fd, SafetensorsHeader header);

  std::string path_;
  int fd_ = -1;
  SafetensorsHeader header_;
};

// One tensor to write; `data` (little-endian, `bytes` long) must stay valid during the call.
struct TensorOut {
  std::string name;
  TensorDtype dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  uint64_t bytes = 0;  // must equal the element count × TensorDtypeSize(dtype)
};

// The header WriteSafetensors writes, length prefix included: "__metadata__" (when not empty) then
// the tensors in the given order, compact JSON padded with spaces to a multiple of 8 bytes (as the
// Rust crate pads). INVALID_ARGUMENT for a duplicate name, "__metadata__" as a tensor
// name, a negative dimension, or bytes that do not match the shape.
absl::StatusOr<std::string> SerializeSafetensorsHeader(
    const std::vector<TensorOut>& tensors, const std::map<std::string, std::string>& metadata);

// Writes a safetensors file at `path` (replacing one there): the header above, then the tensors'
// bytes in the given order, contiguous; fsync'd before returning. The same input gives the same
// bytes. Not atomic: the caller writes into a temporary folder and renames it into place.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                              const std::map<std::string, std::string>& metadata);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_SAFETENSORS_SAFETENSORS_H_
