#include "worker/engine/parallel/gradient_path.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "worker/engine/model/initial_values.h"
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

std::vector<StatePiece> GradientPath::CheckpointPieces() {
  std::vector<StatePiece> pieces;
  auto add = [&](const std::string& prefix, const std::vector<at::Tensor>& per_param) {
    for (Placement& p : Placements(per_param, /*for_writing=*/true)) {
      pieces.push_back(StatePiece{prefix + p.name, p.shape, p.begin, p.end, p.target.detach()});
    }
  };
  add("model.", params_);
  add("optimizer.exp_avg.", optimizer_->exp_avg());
  add("optimizer.exp_avg_sq.", optimizer_->exp_avg_sq());
  return pieces;
}

namespace {

// Reads each placement's elements of prefix + name into its target (through a float32 CPU buffer
// when the target is not one).
absl::Status ReadPlacements(const StateReader& reader, const std::string& prefix,
                            const std::vector<GradientPath::Placement>& placements) {
  torch::NoGradGuard no_grad;
  for (const auto& p : placements) {
    const at::Tensor& target = p.target;
    const bool direct =
        target.device().is_cpu() && target.scalar_type() == at::kFloat && target.is_contiguous();
    at::Tensor buffer = direct ? target : at::empty({p.end - p.begin}, at::kFloat);
    RT_RETURN_IF_ERROR(reader.Read(prefix + p.name, p.begin, p.end, buffer));
    if (!direct) target.copy_(buffer);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GradientPath::LoadParameters(const StateReader& reader, const std::string& prefix) {
  RT_RETURN_IF_ERROR(CheckStateMatches(reader, prefix, ParameterShapes()));
  return ReadPlacements(reader, prefix, Placements(params_, /*for_writing=*/false));
}

absl::Status GradientPath::LoadOptimizer(const StateReader& reader, int64_t optimizer_step) {
  for (const char* moment : {"optimizer.exp_avg.", "optimizer.exp_avg_sq."}) {
    absl::Status matches = CheckStateMatches(reader, moment, ParameterShapes());
    if (!matches.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer state (", moment, "*) in ", matches.message()));
    }
  }
  RT_RETURN_IF_ERROR(ReadPlacements(reader, "optimizer.exp_avg.",
                                    Placements(optimizer_->exp_avg(), /*for_writing=*/false)));
  RT_RETURN_IF_ERROR(ReadPlacements(reader, "optimizer.exp_avg_sq.",
                                    Placements(optimizer_->exp_avg_sq(), /*for_writing=*/false)));
  optimizer_->set_step_count(optimizer_step);
  return absl::OkStatus();
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
  int64_t checkpoint_writers() const override { return comm_ != nullptr ? comm_->mesh().world : 1; }
  ExpectedShapes ParameterShapes() const override {
    ExpectedShapes shapes;
    for (const auto& item : model_.named_parameters())
      shapes.emplace_back(item.key(), item.value().sizes().vec());
    return shapes;
  }

 protected:
  // Every rank holds everything; for writing, rank r of W takes the r-th of W equal runs of each
  // parameter, so the ranks share the writing.
  std::vector<Placement> Placements(const std::vector<at::Tensor>& per_param,
                                    bool for_writing) override {
    const int64_t world = comm_ != nullptr ? comm_->mesh().world : 1;
    const int64_t rank = comm_ != nullptr ? comm_->mesh().rank : 0;
    const ExpectedShapes shapes = ParameterShapes();
    std::vector<Placement> placements;
    for (size_t i = 0; i < per_param.size(); ++i) {
      const int64_t numel = per_param[i].numel();
      const int64_t begin = for_writing ? numel * rank / world : 0;
      const int64_t end = for_writing ? numel * (rank + 1) / world : numel;
      if (begin == end) continue;
      placements.push_back(
          Placement{shapes[i].first, shapes[i].second, begin, end,
                    per_param[i].detach().view({-1}).narrow(0, begin, end - begin)});
    }
    return placements;
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
  void SetGradientSync(bool sync) override { fsdp_->SetGradientSync(sync); }
  void AbandonStep() override {
    ZeroGrad();
    fsdp_->AbandonStep();
  }
  double ClipGradNorm(double max_norm) override {
    return ClipShardedGradNorm(params_, max_norm, [&](double v) { return fsdp_->SumOverGroup(v); });
  }
  ExpectedShapes ParameterShapes() const override { return fsdp_->ParameterShapes(); }
  // The first replica's ranks: ranks [0, shard × cp).
  int64_t checkpoint_writers() const override { return fsdp_->group_size(); }

 protected:
  // This rank's slices of each unit's shard; only the first replica's ranks write (the other
  // replicas hold the same shards).
  std::vector<Placement> Placements(const std::vector<at::Tensor>& per_unit,
                                    bool for_writing) override {
    std::vector<Placement> placements;
    if (for_writing && fsdp_->replicate_rank() != 0) return placements;
    for (const Fsdp::Slice& slice : fsdp_->LocalSlices()) {
      placements.push_back(Placement{
          slice.name, slice.shape, slice.begin, slice.end,
          per_unit[slice.unit].detach().narrow(0, slice.shard_offset, slice.end - slice.begin)});
    }
    return placements;
  }

 private:
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
                                                   const AdamWOptions& adam,
                                                   std::optional<uint64_t> seed) {
  Fsdp::SliceInitializer init;
  if (!model.materialized() && seed.has_value()) {
    init = [&model, seed](const std::string& name, int64_t begin, int64_t end,
                          const at::Tensor& out) {
      FillInitialValues(name, model.args(), *seed, begin, end, out);
    };
  } else if (!model.materialized()) {
    init = [](const std::string&, int64_t, int64_t, const at::Tensor&) {};  // stays zero
  }
  std::shared_ptr<Fsdp> fsdp = Fsdp::Create(model.Units(), comm, options, init);
  model.SetParamSource(fsdp);
  RT_LOG(Info) << fsdp->Describe();
  return std::make_unique<ShardedGradients>(std::move(fsdp), adam);
}

std::vector<at::Tensor> GradientPath::StateTensors() const {
  std::vector<at::Tensor> all = params_;
  for (const at::Tensor& m : optimizer_->exp_avg()) all.push_back(m);
  for (const at::Tensor& v : optimizer_->exp_avg_sq()) all.push_back(v);
  return all;
}

}  // namespace ringtrain
