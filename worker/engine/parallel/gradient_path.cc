#include "worker/engine/parallel/gradient_path.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "worker/engine/optim/clip.h"
#include "worker/engine/parallel/grad_sync.h"
#include "worker/engine/parallel/gradient_paths.h"

namespace ringtrain {

GradientPath::GradientPath(std::vector<std::pair<std::string, at::Tensor>> named,
                           const AdamWOptions& adam) {
  for (const auto& [name, t] : named) params_.push_back(t);
  optimizer_ = std::make_unique<AdamW>(std::move(named), adam);
}

void GradientPath::ZeroGrad() {
  for (at::Tensor& p : params_) p.mutable_grad() = at::Tensor();  // zero_grad(set_to_none)
}

namespace {

// Not detached: AdamW reads .grad().
std::vector<std::pair<std::string, at::Tensor>> NamedParameters(TransformerImpl& model) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& item : model.named_parameters()) named.emplace_back(item.key(), item.value());
  return named;
}

class ReplicatedGradients : public GradientPath {
 public:
  ReplicatedGradients(TransformerImpl& model, Communicator* comm, c10::ScalarType reduce_dtype,
                      const AdamWOptions& adam)
      : GradientPath(NamedParameters(model), adam),
        model_(model),
        comm_(comm),
        reduce_dtype_(reduce_dtype) {}

  void FinishBackward() override {
    if (comm_ != nullptr) {
      AllReduceGradients(*comm_, params_, /*bucket_bytes=*/25 << 20, reduce_dtype_);
    }
  }
  double ClipGradNorm(double max_norm) override {
    return ringtrain::ClipGradNorm(params_, max_norm);
  }
  bool gather_is_collective() const override { return false; }
  FullState GatherFullState() override {
    StateDict model;
    for (const auto& item : model_.named_parameters()) {
      model.emplace_back(item.key(), item.value().detach());
    }
    return FullState{std::move(model), optimizer_->StateDict()};
  }
  absl::Status LoadOptimizerState(const StateDict& full, const std::string& source) override {
    return optimizer_->LoadStateDict(full);
  }

 private:
  TransformerImpl& model_;
  Communicator* comm_;
  c10::ScalarType reduce_dtype_;
};

class ShardedGradients : public GradientPath {
 public:
  explicit ShardedGradients(std::shared_ptr<Fsdp> fsdp, const AdamWOptions& adam)
      : GradientPath(fsdp->shards(), adam), fsdp_(std::move(fsdp)) {}

  void FinishBackward() override { fsdp_->FinishGradients(); }
  double ClipGradNorm(double max_norm) override {
    return ClipShardedGradNorm(params_, max_norm, [&](double v) { return fsdp_->SumOverGroup(v); });
  }
  bool gather_is_collective() const override { return true; }
  FullState GatherFullState() override {
    return FullState{fsdp_->GatherFull(fsdp_->shard_tensors()), FullOptimizerState()};
  }
  absl::Status LoadOptimizerState(const StateDict& full, const std::string& source) override {
    StateDict sharded;
    for (const auto& [name, t] : full) {
      if (name == "step") sharded.emplace_back(name, t);
    }
    for (const char* moment : {"exp_avg.", "exp_avg_sq."}) {
      absl::StatusOr<std::vector<at::Tensor>> shards = fsdp_->ShardFull(full, moment);
      if (!shards.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("optimizer state in ", source,
                         " does not match the model: ", shards.status().message()));
      }
      for (size_t u = 0; u < shards->size(); ++u) {
        sharded.emplace_back(moment + fsdp_->shards()[u].first, std::move((*shards)[u]));
      }
    }
    return optimizer_->LoadStateDict(sharded);
  }

 private:
  // AdamW's state of the shards ("exp_avg.fsdp.unit3") as the replicated run names it
  // ("exp_avg.layers.2.attention.wq.weight"), gathered to full tensors.
  StateDict FullOptimizerState() {
    const StateDict sharded = optimizer_->StateDict();
    std::map<std::string, at::Tensor> by_name(sharded.begin(), sharded.end());
    StateDict full = {{"step", by_name.at("step")}};
    for (const char* moment : {"exp_avg.", "exp_avg_sq."}) {
      std::vector<at::Tensor> per_unit;
      for (const auto& [name, shard] : fsdp_->shards())
        per_unit.push_back(by_name.at(moment + name));
      for (auto& [name, t] : fsdp_->GatherFull(per_unit)) {
        full.emplace_back(moment + name, std::move(t));
      }
    }
    return full;
  }

  std::shared_ptr<Fsdp> fsdp_;
};

}  // namespace

std::unique_ptr<GradientPath> MakeReplicatedGradients(TransformerImpl& model, Communicator* comm,
                                                      c10::ScalarType reduce_dtype,
                                                      const AdamWOptions& adam) {
  return std::make_unique<ReplicatedGradients>(model, comm, reduce_dtype, adam);
}

std::unique_ptr<GradientPath> MakeShardedGradients(TransformerImpl& model, Communicator& comm,
                                                   const FsdpOptions& options,
                                                   const AdamWOptions& adam) {
  std::shared_ptr<Fsdp> fsdp = Fsdp::Create(model.Units(), comm, options);
  model.SetParamSource(fsdp);
  RT_LOG(Info) << fsdp->Describe();
  return std::make_unique<ShardedGradients>(std::move(fsdp), adam);
}

}  // namespace ringtrain
