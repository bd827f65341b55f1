#include "worker/engine/serialize/state_reader.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ringtrain {

DictStateReader::DictStateReader(std::string source,
                                 std::vector<std::pair<std::string, StateDict>> prefixed)
    : source_(std::move(source)) {
  for (auto& [prefix, dict] : prefixed) {
    for (auto& [name, value] : dict) {
      tensors_[prefix + name] = StoredTensor{
          value.sizes().vec(), c10::toString(value.scalar_type()), value.is_floating_point()};
      values_[prefix + name] = std::move(value);
    }
  }
}

absl::Status DictStateReader::Read(const std::string& name, int64_t begin, int64_t end,
                                   const at::Tensor& out) const {
  const auto it = values_.find(name);
  if (it == values_.end()) {
    return absl::NotFoundError(absl::StrCat(source_, " holds no tensor '", name, "'"));
  }
  const int64_t numel = it->second.numel();
  if (begin < 0 || begin > end || end > numel || out.numel() != end - begin) {
    return absl::InvalidArgumentError(absl::StrCat("elements [", begin, ", ", end, ") of '", name,
                                                   "' (", numel, " elements) into ", out.numel()));
  }
  torch::NoGradGuard no_grad;
  out.copy_(it->second.reshape(-1).narrow(0, begin, end - begin));
  bytes_read_ += uint64_t(end - begin) * it->second.element_size();
  return absl::OkStatus();
}

absl::Status CheckStateMatches(const StateReader& reader, const std::string& prefix,
                               const ExpectedShapes& expected) {
  std::map<std::string, const StoredTensor*> left;
  for (const auto& [name, stored] : reader.tensors()) {
    if (name.rfind(prefix, 0) == 0) left[name] = &stored;
  }
  std::vector<std::string> missing, unexpected, mis_shaped;
  for (const auto& [name, shape] : expected) {
    const auto it = left.find(prefix + name);
    if (it == left.end()) {
      missing.push_back(name);
      continue;
    }
    const StoredTensor& stored = *it->second;
    if (stored.shape != shape) {
      mis_shaped.push_back(absl::StrCat(name, " (file ", c10::str(c10::IntArrayRef(stored.shape)),
                                        ", model ", c10::str(c10::IntArrayRef(shape)), ")"));
    } else if (!stored.floating) {
      mis_shaped.push_back(
          absl::StrCat(name, " (dtype ", stored.dtype, ", expected a floating-point tensor)"));
    }
    left.erase(it);
  }
  for (const auto& [name, stored] : left) unexpected.push_back(name.substr(prefix.size()));
  if (missing.empty() && unexpected.empty() && mis_shaped.empty()) return absl::OkStatus();
  std::string message =
      absl::StrCat("state dict '", reader.source(), "' does not match the model:");
  if (!missing.empty()) absl::StrAppend(&message, "\n  missing: ", absl::StrJoin(missing, ", "));
  if (!unexpected.empty()) {
    absl::StrAppend(&message, "\n  unexpected: ", absl::StrJoin(unexpected, ", "));
  }
  if (!mis_shaped.empty()) {
    absl::StrAppend(&message, "\n  wrong shape: ", absl::StrJoin(mis_shaped, ", "));
  }
  return absl::InvalidArgumentError(message);
}

absl::StatusOr<at::Tensor> ReadWhole(const StateReader& reader, const std::string& name) {
  const auto it = reader.tensors().find(name);
  if (it == reader.tensors().end()) {
    return absl::NotFoundError(absl::StrCat(reader.source(), " holds no tensor '", name, "'"));
  }
  at::Tensor out = at::empty(it->second.shape, at::kFloat);
  absl::Status status = reader.Read(name, 0, out.numel(), out.view({-1}));
  if (!status.ok()) return status;
  return out;
}

}  // namespace ringtrain
