// FSDP in the trainer (parallelism: mesh().sharded): the model's parameters become per-unit shards
// (worker/engine/parallel/fsdp.h), and checkpoints keep the replicated run's format — full tensors
// by name for the model and the optimizer — so a sharded run resumes on any shard degree, or
// replicated, and a replicated checkpoint resumes sharded.
#include <map>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "worker/trainer/trainer_state.h"

namespace ringtrain {
namespace trainer_internal {
namespace {

c10::ScalarType DtypeOf(MixedPrecision precision) {
  return precision == MixedPrecision::kBFloat16 ? at::kBFloat16 : at::kFloat;
}

// AdamW's state of the shards ("exp_avg.fsdp.unit3") as the replicated run names it
// ("exp_avg.layers.2.attention.wq.weight"), gathered to full tensors.
StateDict FullOptimizerState(Trainer::State& s) {
  const StateDict sharded = s.optimizer->StateDict();
  std::map<std::string, at::Tensor> by_name(sharded.begin(), sharded.end());
  StateDict full = {{"step", by_name.at("step")}};
  for (const char* moment : {"exp_avg.", "exp_avg_sq."}) {
    std::vector<at::Tensor> per_unit;
    for (const auto& [name, shard] : s.fsdp->shards()) per_unit.push_back(by_name.at(moment + name));
    for (auto& [name, t] : s.fsdp->GatherFull(per_unit)) full.emplace_back(moment + name, std::move(t));
  }
  return full;
}

}  // namespace

absl::Status ShardModel(Trainer::State& s) {
  FsdpOptions options;
  options.param_dtype = DtypeOf(s.config.training.mixed_precision_param);
  options.reduce_dtype = DtypeOf(s.config.training.mixed_precision_reduce);
  options.reshard = s.config.parallelism.fsdp_reshard_after_forward;
  s.fsdp = Fsdp::Create(s.model->Units(), *s.comm, options);
  s.model->SetParamSource(s.fsdp);
  s.params = s.fsdp->shard_tensors();
  RT_LOG(Info) << s.fsdp->Describe();
  return absl::OkStatus();
}

absl::Status LoadShardedOptimizerState(Trainer::State& s, const StateDict& full, const std::string& source) {
  StateDict sharded;
  for (const auto& [name, t] : full) {
    if (name == "step") sharded.emplace_back(name, t);
  }
  for (const char* moment : {"exp_avg.", "exp_avg_sq."}) {
    absl::StatusOr<std::vector<at::Tensor>> shards = s.fsdp->ShardFull(full, moment);
    if (!shards.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer state in ", source,
                                                     " does not match the model: ", shards.status().message()));
    }
    for (size_t u = 0; u < shards->size(); ++u) {
      sharded.emplace_back(moment + s.fsdp->shards()[u].first, std::move((*shards)[u]));
    }
  }
  return s.optimizer->LoadStateDict(sharded);
}

Checkpoint CheckpointOf(Trainer::State& s) {
  if (!s.fsdp) return Checkpoint{ModelStateDict(*s.model), s.optimizer->StateDict(), s.train_state};
  return Checkpoint{s.fsdp->GatherFull(s.fsdp->shard_tensors()), FullOptimizerState(s), s.train_state};
}

}  // namespace trainer_internal
}  // namespace ringtrain
