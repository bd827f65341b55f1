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

namespace ringtrain {
namespace fs = std::filesystem;
namespace {

constexpr char kStepPrefix[] = "step-";

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

absl::Status WriteTextFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot write '", path.string(), "'"));
  return absl::OkStatus();
}

}  // namespace

CheckpointFolder::CheckpointFolder(std::string folder, int64_t keep_latest_k)
    : folder_(std::move(folder)), keep_latest_k_(keep_latest_k) {}

std::string CheckpointFolder::StepPath(int64_t step) const {
  return (fs::path(folder_) / absl::StrCat(kStepPrefix, step)).string();
}

absl::Status CheckpointFolder::Save(const Checkpoint& ckpt, const std::string& config_toml) {
  const int64_t step = ckpt.train_state.step;
  const fs::path final_path = StepPath(step);
  const fs::path tmp = fs::path(folder_) / absl::StrCat(".tmp-", kStepPrefix, step, "-", getpid());
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create checkpoint folder '", folder_, "': ", ec.message()));
  }
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  auto write_all = [&]() -> absl::Status {
    if (ec) return absl::UnavailableError(absl::StrCat("cannot create '", tmp.string(), "'"));
    RT_RETURN_IF_ERROR(WriteStateDict((tmp / "model.pt").string(), ckpt.model));
    RT_RETURN_IF_ERROR(WriteStateDict((tmp / "optimizer.pt").string(), ckpt.optimizer));
    nlohmann::json state = {{"step", step},
                            {"global_sample", ckpt.train_state.global_sample},
                            {"torch_rng_state", Hex(ckpt.train_state.rng_state)}};
    RT_RETURN_IF_ERROR(WriteTextFile(tmp / "train_state.json", state.dump(1) + "\n"));
    RT_RETURN_IF_ERROR(WriteTextFile(tmp / "config.toml", config_toml));
    // Replace an existing step-N (a rerun of the same step) only once the new one is complete.
    fs::remove_all(final_path, ec);
    fs::rename(tmp, final_path, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot move checkpoint into '", final_path.string(), "': ", ec.message()));
    }
    return absl::OkStatus();
  };
  absl::Status status = write_all();
  if (!status.ok()) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return status;
  }
  if (keep_latest_k_ > 0) {
    std::vector<int64_t> steps;
    for (const auto& entry : fs::directory_iterator(folder_, ec)) {
      if (auto s = StepOfName(entry.path().filename().string())) steps.push_back(*s);
    }
    std::sort(steps.rbegin(), steps.rend());
    for (size_t i = keep_latest_k_; i < steps.size(); ++i) fs::remove_all(StepPath(steps[i]), ec);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> CheckpointFolder::Steps() const {
  std::error_code ec;
  std::vector<int64_t> steps;
  if (!fs::exists(folder_, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(folder_, ec)) {
    const auto step = StepOfName(entry.path().filename().string());
    if (step && fs::exists(entry.path() / "train_state.json")) steps.push_back(*step);
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

absl::StatusOr<std::optional<Checkpoint>> CheckpointFolder::LoadNewestUsable(
    std::vector<std::string>* skipped) const {
  RT_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, Steps());
  if (steps.empty()) return std::optional<Checkpoint>();
  std::vector<std::string> problems;
  for (int64_t step : steps) {
    absl::StatusOr<Checkpoint> loaded = Load(step);
    if (loaded.ok()) return std::optional<Checkpoint>(*std::move(loaded));
    // Damage is skipped; anything else (out of memory, an unreadable folder) is not the files'
    // fault and ends the load.
    if (loaded.status().code() != absl::StatusCode::kDataLoss &&
        loaded.status().code() != absl::StatusCode::kNotFound) {
      return loaded.status();
    }
    problems.push_back(absl::StrCat(StepPath(step), ": ", loaded.status().message()));
    skipped->push_back(
        absl::StrCat("skipping checkpoint ", StepPath(step), " (", loaded.status().message(), ")"));
  }
  return absl::DataLossError(
      absl::StrCat("no usable checkpoint in '", folder_, "': ", absl::StrJoin(problems, "; ")));
}

absl::StatusOr<Checkpoint> CheckpointFolder::Load(int64_t step) const {
  const fs::path dir = StepPath(step);
  Checkpoint ckpt;
  RT_ASSIGN_OR_RETURN(ckpt.model, ReadStateDict((dir / "model.pt").string()));
  RT_ASSIGN_OR_RETURN(ckpt.optimizer, ReadStateDict((dir / "optimizer.pt").string()));
  RT_ASSIGN_OR_RETURN(ckpt.train_state, ReadTrainState((dir / "train_state.json").string()));
  return ckpt;
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
  std::map<std::string, at::Tensor> by_name;
  for (const auto& [name, t] : weights) by_name[name] = t;
  std::vector<std::string> missing, mis_shaped;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (parameter, value)
  for (auto& item : model.named_parameters()) {
    auto it = by_name.find(item.key());
    if (it == by_name.end()) {
      missing.push_back(item.key());
      continue;
    }
    if (it->second.sizes() != item.value().sizes()) {
      mis_shaped.push_back(absl::StrCat(item.key(), " (file ", c10::str(it->second.sizes()),
                                        ", model ", c10::str(item.value().sizes()), ")"));
    } else if (!it->second.is_floating_point()) {
      mis_shaped.push_back(absl::StrCat(item.key(), " (dtype ", c10::str(it->second.dtype()),
                                        ", expected a floating-point tensor)"));
    } else {
      copies.emplace_back(item.value(), it->second);
    }
    by_name.erase(it);
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : by_name) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !mis_shaped.empty()) {
    std::string message = absl::StrCat("state dict '", source, "' does not match the model:");
    if (!missing.empty()) absl::StrAppend(&message, "\n  missing: ", absl::StrJoin(missing, ", "));
    if (!unexpected.empty()) {
      absl::StrAppend(&message, "\n  unexpected: ", absl::StrJoin(unexpected, ", "));
    }
    if (!mis_shaped.empty()) {
      absl::StrAppend(&message, "\n  wrong shape: ", absl::StrJoin(mis_shaped, ", "));
    }
    return absl::InvalidArgumentError(message);
  }
  torch::NoGradGuard no_grad;
  for (auto& [param, value] : copies) param.copy_(value);
  return absl::OkStatus();
}

}  // namespace ringtrain
