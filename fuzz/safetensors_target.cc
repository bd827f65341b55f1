// FuzzSafetensors and FuzzSafetensorsIndex: Hugging Face weight files as users hand them to the
// trainer (checkpoint.initial_load_path with initial_load_in_hf) and to ringtrain-convert.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/safetensors/index.h"
#include "common/safetensors/safetensors.h"
#include "fuzz/fuzz_targets.h"

namespace ringtrain::fuzz {
namespace {

// What ParseSafetensorsHeader promises of a header it accepts, for a file of `file_size` bytes.
std::string CheckHeader(const SafetensorsHeader& header, uint64_t file_size) {
  uint64_t cursor = 0;
  for (const TensorEntry& t : header.tensors) {
    const std::string where = absl::StrCat("tensor '", absl::CEscape(t.name), "'");
    if (t.begin != cursor) return absl::StrCat(where, " begins at ", t.begin, ", not ", cursor);
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return absl::StrCat(where, " has a negative dimension");
      numel *= static_cast<uint64_t>(d);  // no overflow: the parser refused that
    }
    if (t.end - t.begin != numel * TensorDtypeSize(t.dtype)) {
      return absl::StrCat(where, "'s bytes do not match its shape");
    }
    cursor = t.end;
  }
  if (header.data_start + cursor != file_size) {
    return absl::StrCat("the tensors end at ", header.data_start + cursor, " of ", file_size);
  }
  return "";
}

bool SameEntries(const std::vector<TensorEntry>& a, const std::vector<TensorEntry>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape ||
        a[i].begin != b[i].begin || a[i].end != b[i].end) {
      return false;
    }
  }
  return true;
}

// The bytes through SafetensorsFile::Open (a memfd stands in for the file) and Read of every
// tensor: the same verdict and header as ParseSafetensorsHeader on the bytes.
std::string CheckFile(const uint8_t* data, size_t size,
                      const absl::StatusOr<SafetensorsHeader>& parsed) {
  const int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0) return absl::StrCat("memfd_create failed: ", std::strerror(errno));
  for (size_t done = 0; done < size;) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) {
      close(fd);
      return absl::StrCat("cannot write the input to a memfd: ", std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(absl::StrCat("/proc/self/fd/", fd));
  close(fd);  // Open holds its own descriptor
  if (file.ok() != parsed.ok()) {
    return absl::StrCat("Open and ParseSafetensorsHeader disagree: ", file.status().ToString(),
                        " / ", parsed.status().ToString());
  }
  if (!file.ok()) return "";
  if (!SameEntries(file->header().tensors, parsed->tensors)) {
    return "Open read another header than ParseSafetensorsHeader";
  }
  for (const TensorEntry& t : file->header().tensors) {
    std::string bytes(t.end - t.begin, '\0');
    const absl::Status read = file->Read(t, bytes.data());
    if (!read.ok()) return absl::StrCat("Read failed: ", read.ToString());
    if (std::memcmp(bytes.data(), data + file->header().data_start + t.begin, bytes.size()) != 0) {
      return absl::StrCat("Read of '", absl::CEscape(t.name), "' gave other bytes");
    }
  }
  return "";
}

}  // namespace

std::string FuzzSafetensors(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader(bytes, size, "fuzz");
  std::string problem = CheckFile(data, size, header);
  if (!problem.empty()) return problem;
  if (!header.ok()) {
    if (header.status().message().empty()) return "a refused header has an empty message";
    return "";
  }
  problem = CheckHeader(*header, size);
  if (!problem.empty()) return problem;

  // Written again by the writer's serialisation (tensors in data order), the file parses to the
  // same header.
  std::vector<TensorOut> out;
  for (const TensorEntry& t : header->tensors) {
    out.push_back({t.name, t.dtype, t.shape, data + header->data_start + t.begin, t.end - t.begin});
  }
  const absl::StatusOr<std::string> rewritten = SerializeSafetensorsHeader(out, header->metadata);
  if (!rewritten.ok()) {
    return absl::StrCat("an accepted header cannot be written again: ",
                        rewritten.status().ToString());
  }
  const std::string file = *rewritten + std::string(bytes.substr(header->data_start));
  const absl::StatusOr<SafetensorsHeader> again =
      ParseSafetensorsHeader(file, file.size(), "again");
  if (!again.ok())
    return absl::StrCat("the rewritten header is refused: ", again.status().ToString());
  if (!SameEntries(again->tensors, header->tensors) || again->metadata != header->metadata) {
    return "the rewritten header parses to another header";
  }
  return "";
}

std::string FuzzSafetensorsIndex(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  // The same text as a max_shard_size spelling.
  const absl::StatusOr<uint64_t> shard_size = ParseShardSize(text);
  if (shard_size.ok() && *shard_size == 0) return "ParseShardSize accepted 0";

  const absl::StatusOr<SafetensorsIndex> index = SafetensorsIndex::Parse(text, "fuzz");
  if (!index.ok()) {
    if (index.status().message().empty()) return "a refused index has an empty message";
    return "";
  }
  for (const auto& [name, file] : index->weight_map) {
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos) {
      return absl::StrCat("shard name '", absl::CEscape(file), "' is not a plain file name");
    }
  }
  const absl::StatusOr<SafetensorsIndex> again = SafetensorsIndex::Parse(index->ToJson(), "again");
  if (!again.ok()) return absl::StrCat("ToJson's text is refused: ", again.status().ToString());
  if (again->weight_map != index->weight_map || again->total_size != index->total_size) {
    return "ToJson's text parses to another index";
  }
  return "";
}

}  // namespace ringtrain::fuzz
