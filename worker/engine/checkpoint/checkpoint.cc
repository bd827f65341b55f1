#include "worker/engine/checkpoint/checkpoint.h"

#include <torch/torch.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/text_file.h"
#include "worker/engine/checkpoint/sharded_checkpoint.h"

namespace ringtrain {
namespace fs = std::filesystem;
namespace {

constexpr char kStepPrefix[] = "step-";
constexpr char kTemporaryPrefix[] = ".tmp-step-";

std::optional<int64_t> StepOfName(const std::string& name) {
  if (name.rfind(kStepPrefix, 0) != 0) return std::nullopt;
  int64_t step = 0;
  if (!absl::SimpleAtoi(name.substr(sizeof(kStepPrefix) - 1), &step) || step < 0) {
    return std::nullopt;
  }
  return step;
}

std::string Hex(const at::Tensor& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  const at::Tensor b = bytes.contiguous();
  const uint8_t* p = b.data_ptr<uint8_t>();
  std::string out;
  out.reserve(b.numel() * 2);
  for (int64_t i = 0; i < b.numel(); ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
  return out;
}

absl::StatusOr<at::Tensor> Unhex(const std::string& text) {
  if (text.size() % 2 != 0) return absl::DataLossError("odd-length hex RNG state");
  at::Tensor out = torch::empty({int64_t(text.size() / 2)}, torch::kUInt8);
  uint8_t* p = out.data_ptr<uint8_t>();
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < text.size(); i += 2) {
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return absl::DataLossError("bad hex digit in RNG state");
    p[i / 2] = uint8_t(hi << 4 | lo);
  }
  return out;
}

}  // namespace

CheckpointFolder::CheckpointFolder(std::string folder, int64_t keep_latest_k)
    : folder_(std::move(folder)), keep_latest_k_(keep_latest_k) {}

std::string CheckpointFolder::StepPath(int64_t step) const {
  return (fs::path(folder_) / absl::StrCat(kStepPrefix, step)).string();
}

std::string CheckpointFolder::TemporaryPath(int64_t step, const std::string& tag) const {
  return (fs::path(folder_) / absl::StrCat(kTemporaryPrefix, step, "-", tag)).string();
}

absl::Status CheckpointFolder::Commit(const TrainState& train_state, const std::string& config_toml,
                                      const std::string& tag, int64_t writers,
                                      absl::Duration timeout) const {
  const int64_t step = train_state.step;
  const std::string tmp = TemporaryPath(step, tag);
  const fs::path final_path = StepPath(step);
  auto commit = [&]() -> absl::Status {
    RT_RETURN_IF_ERROR(IndexParts(tmp, writers, timeout));
    const std::string state_path = (fs::path(tmp) / kTrainStateFile).string();
    RT_RETURN_IF_ERROR(WriteTextFile(state_path, TrainStateJson(train_state)));
    RT_RETURN_IF_ERROR(SyncPath(state_path));
    RT_RETURN_IF_ERROR(WriteTextFile((fs::path(tmp) / "config.toml").string(), config_toml));
    RT_RETURN_IF_ERROR(SyncPath(tmp));
    // Replace an existing step-N (a rerun of the same step) only once the new one is whole.
    std::error_code ec;
    fs::remove_all(final_path, ec);
    fs::rename(tmp, final_path, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot move checkpoint into '", final_path.string(), "': ", ec.message()));
    }
    RT_RETURN_IF_ERROR(SyncPath(folder_));
    const std::string complete = (final_path / kCheckpointCompleteFile).string();
    RT_RETURN_IF_ERROR(WriteTextFile(complete, absl::StrCat("step ", step, "\n")));
    RT_RETURN_IF_ERROR(SyncPath(complete));
    return SyncPath(final_path.string());
  };
  absl::Status status = commit();
  if (!status.ok()) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return status;
  }
  if (keep_latest_k_ > 0) {
    std::error_code ec;
    std::vector<int64_t> steps;
    for (const auto& entry : fs::directory_iterator(folder_, ec)) {
      if (auto s = StepOfName(entry.path().filename().string())) steps.push_back(*s);
    }
    std::sort(steps.rbegin(), steps.rend());
    for (size_t i = keep_latest_k_; i < steps.size(); ++i) fs::remove_all(StepPath(steps[i]), ec);
  }
  return absl::OkStatus();
}

void CheckpointFolder::RemoveIncomplete(const std::string& tag) const {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder_, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string suffix = "-" + tag;
    if (name.rfind(kTemporaryPrefix, 0) != 0) continue;
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      continue;
    }
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);
  }
}

absl::StatusOr<std::vector<int64_t>> CheckpointFolder::Steps() const {
  std::error_code ec;
  std::vector<int64_t> steps;
  if (!fs::exists(folder_, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(folder_, ec)) {
    const auto step = StepOfName(entry.path().filename().string());
    if (!step) continue;
    const bool sharded = fs::exists(entry.path() / kCheckpointCompleteFile);
    const bool legacy = !fs::exists(entry.path() / kCheckpointIndexFile) &&
                        fs::exists(entry.path() / "model.pt") &&
                        fs::exists(entry.path() / kTrainStateFile);
    if (sharded || legacy) steps.push_back(*step);
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot list checkpoint folder '", folder_, "': ", ec.message()));
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

absl::StatusOr<std::optional<int64_t>> CheckpointFolder::LatestStep() const {
  RT_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, Steps());
  if (steps.empty()) return std::optional<int64_t>();
  return std::optional<int64_t>(steps.front());
}

absl::StatusOr<std::optional<StoredCheckpoint>> CheckpointFolder::OpenNewestUsable(
    std::vector<std::string>* skipped) const {
  RT_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, Steps());
  if (steps.empty()) return std::optional<StoredCheckpoint>();
  std::vector<std::string> problems;
  for (int64_t step : steps) {
    absl::StatusOr<StoredCheckpoint> opened = Open(step);
    if (opened.ok()) return std::optional<StoredCheckpoint>(*std::move(opened));
    // Damage is skipped; anything else (out of memory, an unreadable folder) is not the files'
    // fault and ends the load.
    if (opened.status().code() != absl::StatusCode::kDataLoss &&
        opened.status().code() != absl::StatusCode::kNotFound) {
      return opened.status();
    }
    problems.push_back(absl::StrCat(StepPath(step), ": ", opened.status().message()));
    skipped->push_back(
        absl::StrCat("skipping checkpoint ", StepPath(step), " (", opened.status().message(), ")"));
  }
  return absl::DataLossError(
      absl::StrCat("no usable checkpoint in '", folder_, "': ", absl::StrJoin(problems, "; ")));
}

absl::StatusOr<StoredCheckpoint> CheckpointFolder::Open(int64_t step) const {
  return OpenCheckpointStep(StepPath(step));
}

absl::StatusOr<StoredCheckpoint> OpenCheckpointStep(const std::string& step_dir) {
  const fs::path dir = step_dir;
  StoredCheckpoint ckpt;
  ckpt.path = dir.string();
  RT_ASSIGN_OR_RETURN(ckpt.train_state, ReadTrainState((dir / kTrainStateFile).string()));
  if (fs::exists(dir / kCheckpointCompleteFile)) {
    RT_ASSIGN_OR_RETURN(ckpt.state, ShardedStateReader::Open(dir.string()));
    return ckpt;
  }
  // A legacy step: full tensors, read whole.
  RT_ASSIGN_OR_RETURN(StateDict model, ReadStateDict((dir / "model.pt").string()));
  RT_ASSIGN_OR_RETURN(StateDict optimizer, ReadStateDict((dir / "optimizer.pt").string()));
  StateDict moments;
  for (auto& [name, t] : optimizer) {
    if (name == "step") {
      ckpt.train_state.optimizer_step = t.item<int64_t>();
    } else {
      moments.emplace_back(name, std::move(t));
    }
  }
  ckpt.state = std::make_unique<DictStateReader>(
      dir.string(), std::vector<std::pair<std::string, StateDict>>{
                        {"model.", std::move(model)}, {"optimizer.", std::move(moments)}});
  return ckpt;
}

std::string TrainStateJson(const TrainState& train_state) {
  const nlohmann::json state = {{"step", train_state.step},
                                {"global_sample", train_state.global_sample},
                                {"optimizer_step", train_state.optimizer_step},
                                {"torch_rng_state", Hex(train_state.rng_state)}};
  return state.dump(1) + "\n";
}

absl::StatusOr<StateDict> ReadFullModel(const StateReader& state, const std::string& prefix,
                                        const ExpectedShapes& expected) {
  RT_RETURN_IF_ERROR(CheckStateMatches(state, prefix, expected));
  StateDict model;
  for (const auto& [name, shape] : expected) {
    RT_ASSIGN_OR_RETURN(at::Tensor t, ReadWhole(state, prefix + name));
    model.emplace_back(name, std::move(t));
  }
  return model;
}

absl::StatusOr<TrainState> ReadTrainState(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("missing '", path, "'"));
  const nlohmann::json state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("corrupt '", path, "': ", what));
  };
  if (state.is_discarded() || !state.is_object()) return corrupt("not a JSON object");
  for (const char* key : {"step", "global_sample"}) {
    if (!state.contains(key) || !state[key].is_number_integer() || state[key].get<int64_t>() < 0) {
      return corrupt(absl::StrCat("\"", key, "\" is not a count"));
    }
  }
  if (!state.contains("torch_rng_state") || !state["torch_rng_state"].is_string()) {
    return corrupt("\"torch_rng_state\" is not a hex string");
  }
  TrainState train_state;
  train_state.step = state["step"].get<int64_t>();
  train_state.global_sample = state["global_sample"].get<int64_t>();
  if (state.contains("optimizer_step")) {
    if (!state["optimizer_step"].is_number_integer() ||
        state["optimizer_step"].get<int64_t>() < 0) {
      return corrupt("\"optimizer_step\" is not a count");
    }
    train_state.optimizer_step = state["optimizer_step"].get<int64_t>();
  }
  absl::StatusOr<at::Tensor> rng = Unhex(state["torch_rng_state"].get<std::string>());
  if (!rng.ok()) return corrupt(rng.status().message());
  // set_state would throw on any other size.
  const int64_t expected = at::detail::getDefaultCPUGenerator().get_state().numel();
  if (rng->numel() != expected) {
    return corrupt(absl::StrCat("\"torch_rng_state\" holds ", rng->numel(),
                                " bytes; torch's CPU generator state is ", expected));
  }
  train_state.rng_state = *std::move(rng);
  return train_state;
}

StateDict ModelStateDict(const torch::nn::Module& model) {
  StateDict dict;
  for (const auto& item : model.named_parameters()) {
    dict.emplace_back(item.key(), item.value().detach());
  }
  return dict;
}

absl::Status LoadModelWeights(torch::nn::Module& model, const StateDict& weights,
                              const std::string& source) {
  const DictStateReader reader(source, {{"", weights}});
  ExpectedShapes expected;
  for (const auto& item : model.named_parameters())
    expected.emplace_back(item.key(), item.value().sizes().vec());
  RT_RETURN_IF_ERROR(CheckStateMatches(reader, "", expected));
  std::map<std::string, at::Tensor> by_name(weights.begin(), weights.end());
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters()) item.value().copy_(by_name.at(item.key()));
  return absl::OkStatus();
}

}  // namespace ringtrain
