#include "worker/engine/hf/hf_folder.h"

#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/hf_config.h"
#include "common/log.h"
#include "common/safetensors/index.h"
#include "common/safetensors/safetensors.h"
#include "common/status_macros.h"
#include "common/text_file.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

c10::ScalarType ToTorch(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kF32: return at::kFloat;
    case TensorDtype::kBF16: return at::kBFloat16;
    case TensorDtype::kF16: return at::kHalf;
  }
  return at::kFloat;
}

TensorDtype FromTorch(c10::ScalarType dtype) {
  return dtype == at::kBFloat16 ? TensorDtype::kBF16
         : dtype == at::kHalf   ? TensorDtype::kF16
                                : TensorDtype::kF32;
}

absl::Status ReadShard(const std::string& path, const std::set<std::string>* wanted,
                       std::set<std::string>& seen, StateDict& out) {
  RT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  uint64_t bytes = 0;
  for (const TensorEntry& entry : file.header().tensors) bytes += entry.end - entry.begin;
  RT_LOG(Info) << absl::StrFormat("hf import: reading %s (%d tensors, %.1f MiB)", path,
                                  file.header().tensors.size(), bytes / 1048576.0);
  for (const TensorEntry& entry : file.header().tensors) {
    if (wanted != nullptr && wanted->count(entry.name) == 0) {
      return absl::DataLossError(absl::StrCat(
          path, " holds ", entry.name, ", which model.safetensors.index.json puts elsewhere"));
    }
    if (!seen.insert(entry.name).second) {
      return absl::DataLossError(
          absl::StrCat(entry.name, " is in two shards (again in ", path, ")"));
    }
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(ToTorch(entry.dtype)));
    RT_RETURN_IF_ERROR(file.Read(entry, tensor.data_ptr()));
    out.emplace_back(entry.name, std::move(tensor));
  }
  return absl::OkStatus();
}

absl::Status OsError(const std::string& what, const std::string& path, const std::error_code& e) {
  return absl::UnavailableError(absl::StrCat("cannot ", what, " ", path, ": ", e.message()));
}

// Writes the folder's files into `tmp`.
absl::Status WriteFiles(const fs::path& tmp, const StateDict& hf, const HfExportOptions& options) {
  const c10::ScalarType dtype =
      options.dtype == MixedPrecision::kBFloat16 ? at::kBFloat16 : at::kFloat;
  std::vector<at::Tensor> tensors;
  std::vector<uint64_t> bytes;
  for (const auto& [name, tensor] : hf) {
    tensors.push_back(tensor.detach().to(at::kCPU).to(dtype).contiguous());
    bytes.push_back(tensors.back().nbytes());
  }
  const std::vector<std::vector<size_t>> shards = PlanShards(bytes, options.max_shard_bytes);
  SafetensorsIndex index;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file =
        shards.size() == 1 ? "model.safetensors" : ShardFileName(s, shards.size());
    std::vector<TensorOut> out;
    uint64_t shard_bytes = 0;
    for (size_t i : shards[s]) {
      const at::Tensor& t = tensors[i];
      out.push_back({hf[i].first, FromTorch(dtype), t.sizes().vec(), t.data_ptr(), bytes[i]});
      index.weight_map[hf[i].first] = file;
      shard_bytes += bytes[i];
    }
    index.total_size += shard_bytes;
    RT_LOG(Info) << absl::StrFormat("hf export: writing %s (%zu/%zu, %.1f MiB)", file, s + 1,
                                    shards.size(), shard_bytes / 1048576.0);
    RT_RETURN_IF_ERROR(WriteSafetensors((tmp / file).string(), out, {{"format", "pt"}}));
  }
  if (shards.size() > 1) {
    RT_RETURN_IF_ERROR(
        WriteTextFile((tmp / "model.safetensors.index.json").string(), index.ToJson()));
  }
  RT_RETURN_IF_ERROR(
      WriteTextFile((tmp / "config.json").string(), HfConfigJson(options.model, options.dtype)));
  if (!options.tokenizer_path.empty()) {
    // A tokenizer.json keeps Hugging Face's name; a tiktoken file keeps its own.
    const fs::path from(options.tokenizer_path);
    const fs::path name =
        from.extension() == ".json" ? fs::path("tokenizer.json") : from.filename();
    std::error_code e;
    fs::copy_file(from, tmp / name, e);
    if (e) return OsError("copy the tokenizer", options.tokenizer_path, e);
  }
  return absl::OkStatus();
}

// "2.00 GiB in 1.3 s (1.5 GiB/s)" for `tensors`, read or written since `start`.
std::string Throughput(const StateDict& tensors, std::chrono::steady_clock::time_point start) {
  double bytes = 0;
  for (const auto& [name, t] : tensors) bytes += double(t.nbytes());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return absl::StrFormat("%d tensors, %.2f GiB in %.2f s (%.2f GiB/s)", tensors.size(),
                         bytes / double(1 << 30), seconds, bytes / double(1 << 30) / seconds);
}

absl::StatusOr<StateDict> ReadHfTensors(const std::string& dir) {
  const fs::path folder(dir);
  const std::string single = (folder / "model.safetensors").string();
  const std::string index_path = (folder / "model.safetensors.index.json").string();
  StateDict tensors;
  std::set<std::string> seen;
  std::error_code e;
  if (fs::exists(index_path, e)) {
    RT_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(index_path));
    RT_ASSIGN_OR_RETURN(const SafetensorsIndex index, SafetensorsIndex::Parse(text, index_path));
    std::map<std::string, std::set<std::string>> by_file;
    for (const auto& [name, file] : index.weight_map) by_file[file].insert(name);
    for (const auto& [file, names] : by_file) {
      const std::string path = (folder / file).string();
      if (!fs::exists(path, e)) {
        return absl::DataLossError(absl::StrCat(index_path, " names ", file, ", which is missing"));
      }
      RT_RETURN_IF_ERROR(ReadShard(path, &names, seen, tensors));
    }
    for (const auto& [name, file] : index.weight_map) {
      if (seen.count(name) == 0) {
        return absl::DataLossError(
            absl::StrCat(index_path, " puts ", name, " in ", file, ", which does not hold it"));
      }
    }
    return tensors;
  }
  if (!fs::exists(single, e)) {
    return absl::NotFoundError(absl::StrCat(dir,
                                            " holds neither model.safetensors nor "
                                            "model.safetensors.index.json"));
  }
  RT_RETURN_IF_ERROR(ReadShard(single, nullptr, seen, tensors));
  return tensors;
}

}  // namespace

absl::StatusOr<StateDict> ReadHfWeights(const std::string& dir) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<StateDict> tensors = ReadHfTensors(dir);
  if (tensors.ok()) RT_LOG(Info) << "hf import: " << Throughput(*tensors, start);
  return tensors;
}

absl::Status WriteHfFolder(const std::string& dir, const StateDict& hf,
                           const HfExportOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const fs::path target = fs::path(dir).lexically_normal();
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const fs::path tmp = parent / absl::StrCat(".", target.filename().string(), ".tmp-", getpid());
  std::error_code e;
  fs::remove_all(tmp, e);
  fs::create_directories(tmp, e);
  if (e) return OsError("create", tmp.string(), e);
  absl::Status written = WriteFiles(tmp, hf, options);
  if (written.ok()) {
    fs::remove_all(target, e);
    if (!e) fs::rename(tmp, target, e);
    if (e) written = OsError("move the finished folder to", target.string(), e);
  }
  if (!written.ok()) fs::remove_all(tmp, e);
  if (written.ok()) RT_LOG(Info) << "hf export: " << dir << ": " << Throughput(hf, start);
  return written;
}

}  // namespace ringtrain
