#include "worker/engine/hf/hf_folder.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/config/hf_config.h"
#include "common/log.h"
#include "common/safetensors/index.h"
#include "common/safetensors/safetensors.h"
#include "common/status_macros.h"
#include "common/text_file.h"
#include "worker/engine/hf/hf_adapter.h"

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

// Opens one shard's header, checking each tensor against the index (`wanted`, null for a single
// file) and against the shards already opened; records where each tensor is.
absl::Status OpenShard(const std::string& path, const std::set<std::string>* wanted,
                       HfShards& shards) {
  RT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  for (const TensorEntry& entry : file.header().tensors) {
    if (wanted != nullptr && wanted->count(entry.name) == 0) {
      return absl::DataLossError(absl::StrCat(
          path, " holds ", entry.name, ", which model.safetensors.index.json puts elsewhere"));
    }
    if (shards.where.count(entry.name) != 0) {
      return absl::DataLossError(
          absl::StrCat(entry.name, " is in two shards (again in ", path, ")"));
    }
  }
  shards.files.push_back(std::make_unique<SafetensorsFile>(std::move(file)));
  for (const TensorEntry& entry : shards.files.back()->header().tensors) {
    shards.where[entry.name] = {shards.files.back().get(), &entry};
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

}  // namespace

absl::StatusOr<HfShards> OpenHfShards(const std::string& dir) {
  const fs::path folder(dir);
  const std::string single = (folder / "model.safetensors").string();
  const std::string index_path = (folder / "model.safetensors.index.json").string();
  HfShards shards;
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
      RT_RETURN_IF_ERROR(OpenShard(path, &names, shards));
    }
    for (const auto& [name, file] : index.weight_map) {
      if (shards.where.count(name) == 0) {
        return absl::DataLossError(
            absl::StrCat(index_path, " puts ", name, " in ", file, ", which does not hold it"));
      }
    }
    return shards;
  }
  if (!fs::exists(single, e)) {
    return absl::NotFoundError(absl::StrCat(dir,
                                            " holds neither model.safetensors nor "
                                            "model.safetensors.index.json"));
  }
  RT_RETURN_IF_ERROR(OpenShard(single, nullptr, shards));
  return shards;
}

namespace {

absl::StatusOr<StateDict> ReadHfTensors(const std::string& dir) {
  RT_ASSIGN_OR_RETURN(const HfShards shards, OpenHfShards(dir));
  StateDict tensors;
  for (const auto& file : shards.files) {
    uint64_t bytes = 0;
    for (const TensorEntry& entry : file->header().tensors) bytes += entry.end - entry.begin;
    RT_LOG(Info) << absl::StrFormat("hf import: reading %s (%d tensors, %.1f MiB)", file->path(),
                                    file->header().tensors.size(), bytes / 1048576.0);
    for (const TensorEntry& entry : file->header().tensors) {
      at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(ToTorch(entry.dtype)));
      RT_RETURN_IF_ERROR(file->Read(entry, tensor.data_ptr()));
      tensors.emplace_back(entry.name, std::move(tensor));
    }
  }
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

namespace ringtrain {
namespace {

class HfStateReader : public StateReader {
 public:
  struct Source {
    HfShards::Place place;
    int64_t rope_heads = 0;
    std::vector<int64_t> shape;
  };

  HfStateReader(std::string dir, HfShards shards, int64_t head_dim,
                std::map<std::string, Source> sources)
      : dir_(std::move(dir)),
        shards_(std::move(shards)),
        head_dim_(head_dim),
        sources_(std::move(sources)) {
    for (const auto& [name, source] : sources_) {
      tensors_[name] =
          StoredTensor{source.shape, std::string(TensorDtypeName(source.place.entry->dtype)), true};
    }
  }

  const std::string& source() const override { return dir_; }
  const std::map<std::string, StoredTensor>& tensors() const override { return tensors_; }

  absl::Status Read(const std::string& name, int64_t begin, int64_t end,
                    const at::Tensor& out) const override {
    const auto it = sources_.find(name);
    if (it == sources_.end()) {
      return absl::NotFoundError(absl::StrCat(dir_, " holds no tensor for '", name, "'"));
    }
    const Source& src = it->second;
    int64_t numel = 1;
    for (int64_t d : src.shape) numel *= d;
    if (begin < 0 || begin > end || end > numel || out.numel() != end - begin) {
      return absl::InvalidArgumentError(absl::StrCat("elements [", begin, ", ", end, ") of '", name,
                                                     "' (", numel, " elements) into ",
                                                     out.numel()));
    }
    const TensorEntry& entry = *src.place.entry;
    const uint64_t size = TensorDtypeSize(entry.dtype);
    // Straight into `out` when it is what the file holds (F32 into float32): no buffer.
    const bool direct =
        out.scalar_type() == ToTorch(entry.dtype) && out.is_contiguous() && out.device().is_cpu();
    at::Tensor buffer =
        direct ? out : at::empty({end - begin}, at::TensorOptions().dtype(ToTorch(entry.dtype)));
    char* data = static_cast<char*>(buffer.data_ptr());
    if (src.rope_heads == 0) {
      RT_RETURN_IF_ERROR(src.place.file->ReadRange(entry, uint64_t(begin) * size,
                                                   uint64_t(end - begin) * size, data));
    } else {
      // Row by row: our row r is their row HfRowOf(r); only the columns asked for.
      const int64_t columns = src.shape[1];
      for (int64_t at = begin; at < end;) {
        const int64_t row = at / columns, column = at % columns;
        const int64_t take = std::min(end - at, columns - column);
        const int64_t from = HfRowOf(row, head_dim_) * columns + column;
        RT_RETURN_IF_ERROR(src.place.file->ReadRange(entry, uint64_t(from) * size,
                                                     uint64_t(take) * size,
                                                     data + uint64_t(at - begin) * size));
        at += take;
      }
    }
    bytes_read_ += uint64_t(end - begin) * size;
    torch::NoGradGuard no_grad;
    if (!direct) out.copy_(buffer.view(out.sizes()));
    return absl::OkStatus();
  }

 private:
  std::string dir_;
  HfShards shards_;
  int64_t head_dim_;
  std::map<std::string, Source> sources_;
  std::map<std::string, StoredTensor> tensors_;
};

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateReader>> OpenHfStateReader(const std::string& dir,
                                                               const ModelArgs& args) {
  RT_ASSIGN_OR_RETURN(HfShards shards, OpenHfShards(dir));
  std::map<std::string, HfShards::Place> left = shards.where;
  std::map<std::string, HfStateReader::Source> sources;
  std::vector<std::string> missing, mis_shaped;
  for (const auto& [name, shape] : ParameterShapes(args)) {
    const HfName target = ToHfName(name, args);
    const auto it = left.find(target.name);
    if (it == left.end()) {
      missing.push_back(target.name);
      continue;
    }
    const HfShards::Place place = it->second;
    left.erase(it);
    if (place.entry->shape != shape) {
      mis_shaped.push_back(absl::StrCat(target.name, " ", ShapeText(place.entry->shape),
                                        " where the model has ", ShapeText(shape)));
      continue;
    }
    sources[name] = HfStateReader::Source{place, target.rope_heads, shape};
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, place] : left) {
    if (args.tie_word_embeddings && name == "lm_head.weight") continue;
    if (absl::EndsWith(name, "rotary_emb.inv_freq")) continue;
    unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty() || !mis_shaped.empty()) {
    std::string message = absl::StrCat(
        "Hugging Face weights ", dir, " do not match the model (model.hf_assets_path or [model]):");
    if (!missing.empty()) absl::StrAppend(&message, "\n  missing: ", absl::StrJoin(missing, ", "));
    if (!unexpected.empty()) {
      absl::StrAppend(&message, "\n  unexpected: ", absl::StrJoin(unexpected, ", "));
    }
    if (!mis_shaped.empty()) {
      absl::StrAppend(&message, "\n  wrong shape: ", absl::StrJoin(mis_shaped, ", "));
    }
    return absl::InvalidArgumentError(message);
  }
  return std::unique_ptr<StateReader>(
      new HfStateReader(dir, std::move(shards), args.head_dim(), std::move(sources)));
}

}  // namespace ringtrain
