#include "worker/engine/checkpoint/sharded_checkpoint.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/text_file.h"

namespace ringtrain {
namespace fs = std::filesystem;
namespace {

constexpr char kIndexFormat[] = "ringtrain-sharded-checkpoint/1";

// A part file's metadata value for one piece: {"shape": [...], "begin": b, "end": e}.
std::string PieceMetadata(const StatePiece& piece) {
  return nlohmann::json{{"shape", piece.shape}, {"begin", piece.begin}, {"end", piece.end}}.dump();
}

struct PartPiece {
  std::string name;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;
};

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The pieces a part file holds, from its header: each tensor 1-D F32 with its metadata entry.
absl::StatusOr<std::vector<PartPiece>> PartPieces(const SafetensorsFile& file) {
  std::vector<PartPiece> pieces;
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("checkpoint part ", file.path(), ": ", what));
  };
  for (const TensorEntry& entry : file.header().tensors) {
    const auto it = file.header().metadata.find(entry.name);
    if (it == file.header().metadata.end())
      return bad(absl::StrCat("'", entry.name, "' has no range"));
    const nlohmann::json meta = nlohmann::json::parse(it->second, nullptr, false);
    if (meta.is_discarded() || !meta.is_object() || !meta.contains("shape") ||
        !meta["shape"].is_array() || !meta.contains("begin") ||
        !meta["begin"].is_number_integer() || !meta.contains("end") ||
        !meta["end"].is_number_integer()) {
      return bad(absl::StrCat("'", entry.name, "' has a malformed range"));
    }
    PartPiece piece{entry.name, {}, meta["begin"].get<int64_t>(), meta["end"].get<int64_t>()};
    for (const auto& d : meta["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return bad(absl::StrCat("'", entry.name, "' has a malformed shape"));
      }
      piece.shape.push_back(d.get<int64_t>());
    }
    if (entry.dtype != TensorDtype::kF32 || entry.shape.size() != 1 || piece.begin < 0 ||
        piece.end <= piece.begin || piece.end > Numel(piece.shape) ||
        entry.shape[0] != piece.end - piece.begin) {
      return bad(absl::StrCat("'", entry.name, "' does not hold elements [", piece.begin, ", ",
                              piece.end, ") as float32"));
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

// Pieces (begin, end) of a tensor of `numel` elements, sorted: OK when they tile [0, numel).
absl::Status CheckTiling(std::vector<std::pair<int64_t, int64_t>> ranges, int64_t numel,
                         const std::string& name, const std::string& where) {
  std::sort(ranges.begin(), ranges.end());
  int64_t next = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != next) {
      return absl::DataLossError(absl::StrCat(where, ": the pieces of '", name, "' ",
                                              begin < next ? "overlap" : "leave a gap",
                                              " at element ", std::min(begin, next)));
    }
    next = end;
  }
  if (next != numel) {
    return absl::DataLossError(
        absl::StrCat(where, ": the pieces of '", name, "' end at element ", next, " of ", numel));
  }
  return absl::OkStatus();
}

}  // namespace

std::string RankPartName(int64_t rank) { return absl::StrFormat("rank-%05d.safetensors", rank); }

absl::Status WriteRankPart(const std::string& dir, int64_t rank,
                           const std::vector<StatePiece>& pieces) {
  std::vector<TensorOut> tensors;
  std::map<std::string, std::string> metadata;
  for (const StatePiece& piece : pieces) {
    if (!piece.data.device().is_cpu() || piece.data.scalar_type() != at::kFloat ||
        !piece.data.is_contiguous() || piece.data.numel() != piece.end - piece.begin) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint piece '", piece.name, "' is not ",
                                                     piece.end - piece.begin,
                                                     " contiguous float32 elements on the CPU"));
    }
    tensors.push_back(TensorOut{piece.name,
                                TensorDtype::kF32,
                                {piece.end - piece.begin},
                                piece.data.data_ptr(),
                                uint64_t(piece.data.nbytes())});
    metadata[piece.name] = PieceMetadata(piece);
  }
  const std::string name = RankPartName(rank);
  const std::string tmp = (fs::path(dir) / ("." + name + ".part")).string();
  const std::string path = (fs::path(dir) / name).string();
  RT_RETURN_IF_ERROR(WriteSafetensors(tmp, tensors, metadata));  // fsync'd
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status IndexParts(const std::string& dir, int64_t writers, absl::Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  std::vector<int64_t> missing;
  for (;;) {
    missing.clear();
    for (int64_t r = 0; r < writers; ++r) {
      if (!fs::exists(fs::path(dir) / RankPartName(r))) missing.push_back(r);
    }
    if (missing.empty()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the checkpoint parts of rank(s) ", absl::StrJoin(missing, ", "),
                       " did not reach ", dir, " within ", absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  nlohmann::json files = nlohmann::json::object();
  nlohmann::json tensors = nlohmann::json::object();
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> ranges;
  for (int64_t r = 0; r < writers; ++r) {
    const std::string name = RankPartName(r);
    RT_ASSIGN_OR_RETURN(const SafetensorsFile file,
                        SafetensorsFile::Open((fs::path(dir) / name).string()));
    std::error_code ec;
    files[name] = uint64_t(fs::file_size(file.path(), ec));
    RT_ASSIGN_OR_RETURN(const std::vector<PartPiece> pieces, PartPieces(file));
    for (const PartPiece& piece : pieces) {
      nlohmann::json& tensor = tensors[piece.name];
      if (tensor.is_null()) tensor = {{"shape", piece.shape}, {"pieces", nlohmann::json::array()}};
      if (tensor["shape"].get<std::vector<int64_t>>() != piece.shape) {
        return absl::DataLossError(absl::StrCat("checkpoint part ", file.path(), ": '", piece.name,
                                                "' has another shape than in the other parts"));
      }
      tensor["pieces"].push_back({name, piece.begin, piece.end});
      ranges[piece.name].emplace_back(piece.begin, piece.end);
    }
  }
  for (const auto& [name, tensor_ranges] : ranges) {
    RT_RETURN_IF_ERROR(CheckTiling(
        tensor_ranges, Numel(tensors[name]["shape"].get<std::vector<int64_t>>()), name, dir));
  }
  const nlohmann::json index = {{"format", kIndexFormat}, {"files", files}, {"tensors", tensors}};
  const std::string path = (fs::path(dir) / kCheckpointIndexFile).string();
  RT_RETURN_IF_ERROR(WriteTextFile(path, index.dump(1) + "\n"));
  return SyncPath(path);
}

absl::StatusOr<std::unique_ptr<ShardedStateReader>> ShardedStateReader::Open(
    const std::string& step_dir) {
  const std::string index_path = (fs::path(step_dir) / kCheckpointIndexFile).string();
  auto corrupt = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("corrupt '", index_path, "': ", what));
  };
  absl::StatusOr<std::string> text = ReadTextFile(index_path);
  if (!text.ok()) return absl::DataLossError(absl::StrCat("missing '", index_path, "'"));
  const nlohmann::json index = nlohmann::json::parse(*text, nullptr, false);
  if (index.is_discarded() || !index.is_object()) return corrupt("not a JSON object");
  if (!index.contains("format") || index["format"] != kIndexFormat) {
    return corrupt(absl::StrCat("\"format\" is not \"", kIndexFormat, "\""));
  }
  if (!index.contains("files") || !index["files"].is_object() || !index.contains("tensors") ||
      !index["tensors"].is_object()) {
    return corrupt("\"files\" or \"tensors\" is not an object");
  }
  auto reader = std::unique_ptr<ShardedStateReader>(new ShardedStateReader());
  reader->dir_ = step_dir;
  std::map<std::string, size_t> file_number;
  for (const auto& [name, size] : index["files"].items()) {
    if (name.empty() || name.find('/') != std::string::npos || name[0] == '.' ||
        !size.is_number_unsigned()) {
      return corrupt(absl::StrCat("bad file entry '", name, "'"));
    }
    const fs::path path = fs::path(step_dir) / name;
    std::error_code ec;
    const uint64_t actual = fs::file_size(path, ec);
    if (ec)
      return absl::DataLossError(absl::StrCat("missing checkpoint part '", path.string(), "'"));
    if (actual != size.get<uint64_t>()) {
      return absl::DataLossError(absl::StrCat("checkpoint part '", path.string(), "' is ", actual,
                                              " bytes; the index says ", size.get<uint64_t>(),
                                              " (truncated or replaced)"));
    }
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path.string());
    if (!file.ok()) return absl::DataLossError(file.status().message());
    file_number[name] = reader->files_.size();
    reader->files_.push_back(*std::move(file));
  }
  for (const auto& [name, tensor] : index["tensors"].items()) {
    if (!tensor.is_object() || !tensor.contains("shape") || !tensor["shape"].is_array() ||
        !tensor.contains("pieces") || !tensor["pieces"].is_array()) {
      return corrupt(absl::StrCat("tensor '", name, "' has no shape or pieces"));
    }
    StoredTensor stored{{}, "float32", true};
    for (const auto& d : tensor["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return corrupt(absl::StrCat("tensor '", name, "' has a malformed shape"));
      }
      stored.shape.push_back(d.get<int64_t>());
    }
    std::vector<Piece>& pieces = reader->pieces_[name];
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const auto& p : tensor["pieces"]) {
      if (!p.is_array() || p.size() != 3 || !p[0].is_string() || !p[1].is_number_integer() ||
          !p[2].is_number_integer() || !file_number.count(p[0].get<std::string>())) {
        return corrupt(absl::StrCat("tensor '", name, "' has a malformed piece"));
      }
      Piece piece{p[1].get<int64_t>(), p[2].get<int64_t>(), file_number[p[0].get<std::string>()]};
      const SafetensorsFile& file = reader->files_[piece.file];
      for (const TensorEntry& entry : file.header().tensors) {
        if (entry.name == name) piece.entry = &entry;
      }
      if (piece.entry == nullptr || piece.entry->dtype != TensorDtype::kF32 || piece.begin < 0 ||
          piece.end < piece.begin ||
          piece.entry->end - piece.entry->begin != uint64_t(piece.end - piece.begin) * 4) {
        return absl::DataLossError(absl::StrCat("checkpoint part '", file.path(),
                                                "' does not hold elements [", piece.begin, ", ",
                                                piece.end, ") of '", name, "'"));
      }
      pieces.push_back(piece);
      ranges.emplace_back(piece.begin, piece.end);
    }
    RT_RETURN_IF_ERROR(CheckTiling(ranges, Numel(stored.shape), name, index_path));
    std::sort(pieces.begin(), pieces.end(),
              [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
    reader->tensors_[name] = std::move(stored);
  }
  return reader;
}

absl::Status ShardedStateReader::Read(const std::string& name, int64_t begin, int64_t end,
                                      const at::Tensor& out) const {
  const auto it = pieces_.find(name);
  if (it == pieces_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, " holds no tensor '", name, "'"));
  }
  const int64_t numel = Numel(tensors_.at(name).shape);
  if (begin < 0 || begin > end || end > numel || out.numel() != end - begin) {
    return absl::InvalidArgumentError(absl::StrCat("elements [", begin, ", ", end, ") of '", name,
                                                   "' (", numel, " elements) into ", out.numel()));
  }
  const bool direct =
      out.device().is_cpu() && out.scalar_type() == at::kFloat && out.is_contiguous();
  at::Tensor buffer = direct ? out : at::empty({end - begin}, at::kFloat);
  float* data = buffer.data_ptr<float>();
  for (const Piece& piece : it->second) {
    const int64_t from = std::max(begin, piece.begin), to = std::min(end, piece.end);
    if (from >= to) continue;
    RT_RETURN_IF_ERROR(files_[piece.file].ReadRange(*piece.entry, uint64_t(from - piece.begin) * 4,
                                                    uint64_t(to - from) * 4,
                                                    data + (from - begin)));
    bytes_read_ += uint64_t(to - from) * 4;
  }
  if (!direct) {
    torch::NoGradGuard no_grad;
    out.copy_(buffer.view(out.sizes()));
  }
  return absl::OkStatus();
}

}  // namespace ringtrain
