#include "worker/engine/parallel/fsdp.h"

#include <torch/torch.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ringtrain {

struct Fsdp::Unit {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> offsets, numels;
  int64_t numel = 0;        // the unit's parameters, unpadded
  int64_t shard_numel = 0;  // padded numel / group size
  at::Tensor shard;         // this rank's float32 shard: a leaf, the optimizer's parameter
  at::Tensor full;          // the gathered parameters (param dtype); memory released when freed
  at::Tensor incoming;      // what an all-gather in flight writes; adopted by `full` when done
  bool resident = false;    // `full` holds the gathered parameters
  bool in_flight = false;   // an all-gather into `full` is pending
  PendingWork gather;
  // With gradient sync off: the unit's full float32 gradient, summed over the micro-batches since
  // the last reduce-scatter (undefined when none is held).
  at::Tensor held;
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Releases a buffer's memory, keeping the tensor (and every view of it the graph saved).
void ReleaseStorage(const at::Tensor& t) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  storage->set_nbytes(0);
}

// Moves `source`'s memory into the released buffer `target`. No op writes `target`, so its version
// counter stays where the graph saw it: the saved views read the new contents as their own.
void AdoptStorage(const at::Tensor& target, at::Tensor& source) {
  c10::StorageImpl* from = source.storage().unsafeGetStorageImpl();
  c10::StorageImpl* to = target.storage().unsafeGetStorageImpl();
  const size_t bytes = from->nbytes();
  to->set_data_ptr_noswap(from->set_data_ptr(c10::DataPtr(nullptr, source.device())));
  to->set_nbytes(bytes);
  from->set_nbytes(0);
  source = at::Tensor();
}

const char* DtypeName(c10::ScalarType dtype) {
  return dtype == at::kBFloat16 ? "bfloat16"
         : dtype == at::kFloat  ? "float32"
                                : c10::toString(dtype);
}

// The unit's parameters as views of its gathered buffer.
std::vector<at::Tensor> ParameterViews(const Fsdp::Unit& unit) {
  std::vector<at::Tensor> views;
  for (size_t i = 0; i < unit.names.size(); ++i) {
    views.push_back(unit.full.narrow(0, unit.offsets[i], unit.numels[i]).view(unit.shapes[i]));
  }
  return views;
}

}  // namespace

// A unit of one Fsdp, held by the autograd context as a capsule.
struct FsdpUnitCall : torch::CustomClassHolder {
  FsdpUnitCall(std::shared_ptr<Fsdp> f, int64_t u) : fsdp(std::move(f)), unit(u) {}
  std::shared_ptr<Fsdp> fsdp;
  int64_t unit;
};

// shard → the unit's full parameters (views of the gathered buffer). Backward: the parameters'
// gradients, reduce-scattered to the shard owners, become the shard's gradient.
class UnshardFunction : public torch::autograd::Function<UnshardFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& shard,
                               c10::intrusive_ptr<FsdpUnitCall> call) {
    (void)shard;
    const Fsdp::Unit& unit = *call->fsdp->units_[call->unit];
    ctx->saved_data["call"] = c10::IValue::make_capsule(std::move(call));
    return ParameterViews(unit);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto call =
        c10::static_intrusive_pointer_cast<FsdpUnitCall>(ctx->saved_data["call"].toCapsule());
    Fsdp& fsdp = *call->fsdp;
    Fsdp::Unit& unit = *fsdp.units_[call->unit];
    const auto options = unit.shard.options().dtype(fsdp.options_.reduce_dtype);
    const int64_t padded = fsdp.group_size_ * unit.shard_numel;
    // Sync off, or a gradient held from earlier micro-batches: this one is added into the held
    // float32 gradient (in micro-batch order), which is reduce-scattered once sync is back on.
    const bool hold = !fsdp.gradient_sync_ || unit.held.defined();
    if (hold && !unit.held.defined()) unit.held = at::zeros({padded}, unit.shard.options());
    at::Tensor flat = hold ? unit.held : at::zeros({padded}, options);
    for (size_t i = 0; i < unit.names.size(); ++i) {
      if (!grads[i].defined()) continue;
      at::Tensor part = flat.narrow(0, unit.offsets[i], unit.numels[i]);
      if (hold) {
        part.add_(grads[i].reshape(-1));
      } else {
        part.copy_(grads[i].reshape(-1));
      }
    }
    if (!fsdp.gradient_sync_) {
      fsdp.Free(call->unit);
      return {at::Tensor(), at::Tensor()};
    }
    if (hold) {
      flat = unit.held.to(fsdp.options_.reduce_dtype);  // a copy when the reduce dtype is float32
      unit.held = at::Tensor();
    }
    // The previous unit's reduce-scatter had this unit's backward to complete in.
    fsdp.FinishReduce();
    at::Tensor mine = at::empty({unit.shard_numel}, options);
    PendingWork work = fsdp.comm_.ReduceScatter(fsdp.comm_.fsdp_group(), mine, flat);
    fsdp.comm_.stats().bytes_sent += flat.nbytes() / fsdp.group_size_ * (fsdp.group_size_ - 1);
    fsdp.in_flight_ = {call->unit, flat, mine, std::move(work)};
    fsdp.Free(call->unit);  // every use of the parameters has its gradient: reshard
    // The shard's gradient is added by FinishReduce once the reduce-scatter is done.
    return {at::Tensor(), at::Tensor()};
  }
};

// Identity on a unit's output; its backward, which runs before the unit's, gathers the unit's
// parameters again and issues the previous unit's gather.
class PreBackwardFunction : public torch::autograd::Function<PreBackwardFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& output,
                            c10::intrusive_ptr<FsdpUnitCall> call) {
    ctx->saved_data["call"] = c10::IValue::make_capsule(std::move(call));
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto call =
        c10::static_intrusive_pointer_cast<FsdpUnitCall>(ctx->saved_data["call"].toCapsule());
    call->fsdp->EnsureGathered(call->unit);
    if (call->unit > 0) call->fsdp->StartGather(call->unit - 1);
    return {grads[0], at::Tensor()};
  }
};

Fsdp::Fsdp(Communicator& comm, FsdpOptions options)
    : comm_(comm),
      options_(options),
      group_size_(comm.mesh().fsdp_size()),
      group_rank_(comm.mesh().fsdp_rank()) {}

std::shared_ptr<Fsdp> Fsdp::Create(const std::vector<NamedTensors>& units, Communicator& comm,
                                   FsdpOptions options, const SliceInitializer& init) {
  torch::NoGradGuard no_grad;
  std::shared_ptr<Fsdp> fsdp(new Fsdp(comm, options));
  const int64_t f = fsdp->group_size_;
  for (size_t u = 0; u < units.size(); ++u) {
    auto unit = std::make_shared<Unit>();
    for (const auto& [name, param] : units[u]) {
      unit->names.push_back(name);
      unit->shapes.push_back(param.sizes().vec());
      unit->offsets.push_back(unit->numel);
      unit->numels.push_back(param.numel());
      unit->numel += param.numel();
    }
    unit->shard_numel = (unit->numel + f - 1) / f;
    const int64_t first = fsdp->group_rank_ * unit->shard_numel;
    const auto device = at::TensorOptions()
                            .dtype(at::kFloat)
                            .device(init ? comm.device() : units[u].at(0).second.device());
    if (init) {
      // Only this rank's elements, each from the initializer: the padding stays zero.
      at::Tensor shard = at::zeros({unit->shard_numel}, at::kFloat);
      for (size_t i = 0; i < unit->names.size(); ++i) {
        const int64_t begin = std::max(first, unit->offsets[i]);
        const int64_t end = std::min(first + unit->shard_numel, unit->offsets[i] + unit->numels[i]);
        if (begin >= end) continue;
        init(unit->names[i], begin - unit->offsets[i], end - unit->offsets[i],
             shard.narrow(0, begin - first, end - begin));
      }
      unit->shard = shard.to(device.device()).requires_grad_(true);
    } else {
      std::vector<at::Tensor> pieces;
      for (const auto& [name, param] : units[u]) {
        pieces.push_back(param.detach().to(at::kFloat).reshape(-1));
      }
      const int64_t padding = unit->shard_numel * f - unit->numel;
      if (padding > 0) pieces.push_back(at::zeros({padding}, device));
      const at::Tensor flat = at::cat(pieces);
      unit->shard = flat.narrow(0, first, unit->shard_numel).clone().requires_grad_(true);
    }
    unit->full = at::empty({unit->shard_numel * f}, device.dtype(options.param_dtype));
    ReleaseStorage(unit->full);
    fsdp->shards_.emplace_back(absl::StrCat("fsdp.unit", u), unit->shard);
    fsdp->units_.push_back(std::move(unit));
    // The module keeps an empty tensor in place of the parameter (on its device: meta for a model
    // never materialized): its memory is the shards now.
    for (const auto& named : units[u])
      named.second.set_data(at::empty({0}, named.second.options()));
  }
  return fsdp;
}

std::vector<at::Tensor> Fsdp::shard_tensors() const {
  std::vector<at::Tensor> tensors;
  for (const auto& unit : units_) tensors.push_back(unit->shard);
  return tensors;
}

void Fsdp::StartGather(int64_t u) {
  Unit& unit = *units_[u];
  if (unit.resident || unit.in_flight) return;
  unit.incoming = at::empty(unit.full.sizes(), unit.full.options());
  const at::Tensor send = unit.shard.detach().to(options_.param_dtype);
  unit.gather = comm_.AllGatherInto(comm_.fsdp_group(), unit.incoming, send);
  comm_.stats().bytes_sent += send.nbytes() * (group_size_ - 1);
  unit.in_flight = true;
}

void Fsdp::EnsureGathered(int64_t u) {
  Unit& unit = *units_[u];
  if (unit.resident) return;
  StartGather(u);
  comm_.Wait(unit.gather);
  AdoptStorage(unit.full, unit.incoming);
  unit.in_flight = false;
  unit.resident = true;
}

void Fsdp::AbandonStep() {
  for (const std::shared_ptr<Unit>& unit : units_) {
    unit->gather = PendingWork();
    unit->incoming = at::Tensor();
    unit->in_flight = false;
    unit->held = at::Tensor();
    if (unit->resident) ReleaseStorage(unit->full);
    unit->resident = false;
  }
  in_flight_ = PendingReduce{};
  gradient_sync_ = true;
}

void Fsdp::Free(int64_t u) {
  Unit& unit = *units_[u];
  if (unit.in_flight) {  // a prefetch nobody used: finish it before its buffer goes
    comm_.Wait(unit.gather);
    unit.incoming = at::Tensor();
    unit.in_flight = false;
  }
  if (!unit.resident) return;
  ReleaseStorage(unit.full);
  unit.resident = false;
}

bool Fsdp::ReshardsAfterForward(int64_t u) const {
  switch (options_.reshard) {
    case ReshardAfterForward::kAlways: return true;
    case ReshardAfterForward::kNever: return false;
    case ReshardAfterForward::kDefault: break;
  }
  return u + 1 < int64_t(units_.size());  // the last unit's backward comes next
}

std::vector<at::Tensor> Fsdp::Gather(int64_t u, bool recompute) {
  EnsureGathered(u);
  // Overlap: the unit that runs next (forward order, or backward order when recomputing) is
  // gathered while this one computes.
  const int64_t next = recompute ? u - 1 : u + 1;
  if (next >= 0 && next < int64_t(units_.size())) StartGather(next);
  if (!at::GradMode::is_enabled()) return ParameterViews(*units_[u]);
  return UnshardFunction::apply(units_[u]->shard,
                                c10::make_intrusive<FsdpUnitCall>(shared_from_this(), u));
}

at::Tensor Fsdp::AfterForward(int64_t u, const at::Tensor& output, bool recompute) {
  if (!at::GradMode::is_enabled()) {  // no backward of this forward: nothing to keep
    Free(u);
    return output;
  }
  if (recompute) return output;  // the unit's backward runs next and frees it
  if (ReshardsAfterForward(u)) Free(u);
  return PreBackwardFunction::apply(output,
                                    c10::make_intrusive<FsdpUnitCall>(shared_from_this(), u));
}

void Fsdp::FinishReduce() {
  if (!in_flight_.work) return;
  comm_.Wait(*in_flight_.work);
  torch::NoGradGuard no_grad;
  const at::Tensor gradient = in_flight_.mine.to(at::kFloat);
  at::Tensor& grad = units_[in_flight_.unit]->shard.mutable_grad();
  if (grad.defined()) {
    grad.add_(gradient);
  } else {
    grad = gradient;
  }
  in_flight_ = {};
}

void Fsdp::FinishGradients() {
  FinishReduce();
  torch::NoGradGuard no_grad;
  const bool replicated = comm_.mesh().replicate() > 1;
  std::vector<at::Tensor> reduced;
  std::vector<PendingWork> works;
  for (const auto& unit : units_) {
    TORCH_CHECK(!unit->held.defined(),
                "fsdp: a unit still holds an unreduced gradient; SetGradientSync(true) must come "
                "before the step's last backward");
    if (!unit->shard.grad().defined()) unit->shard.mutable_grad() = at::zeros_like(unit->shard);
    if (!replicated) continue;
    reduced.push_back(
        unit->shard.grad().to(options_.reduce_dtype, /*non_blocking=*/false, /*copy=*/true));
    works.push_back(comm_.AllReduce(comm_.replicate_group(), reduced.back()));
    comm_.stats().bytes_sent += reduced.back().nbytes();
  }
  for (size_t i = 0; i < works.size(); ++i) {
    comm_.Wait(works[i]);
    units_[i]->shard.mutable_grad().copy_(reduced[i]);
  }
}

double Fsdp::SumOverGroup(double value) {
  at::Tensor t =
      at::full({1}, value, at::TensorOptions().dtype(at::kDouble).device(comm_.device()));
  PendingWork work = comm_.AllReduce(comm_.fsdp_group(), t);
  comm_.Wait(work);
  return t.item<double>();
}

NamedTensors Fsdp::GatherFull(const std::vector<at::Tensor>& per_unit) {
  torch::NoGradGuard no_grad;
  NamedTensors full;
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& unit = *units_[u];
    const at::Tensor mine = per_unit.at(u).detach().to(at::kFloat).contiguous();
    at::Tensor flat = at::empty({unit.shard_numel * group_size_}, mine.options());
    PendingWork work = comm_.AllGatherInto(comm_.fsdp_group(), flat, mine);
    comm_.Wait(work);
    for (size_t i = 0; i < unit.names.size(); ++i) {
      full.emplace_back(unit.names[i], flat.narrow(0, unit.offsets[i], unit.numels[i])
                                           .view(unit.shapes[i])
                                           .to(at::kCPU, true, true));
    }
  }
  return full;
}

std::vector<Fsdp::Slice> Fsdp::LocalSlices() const {
  std::vector<Slice> slices;
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& unit = *units_[u];
    const int64_t first = group_rank_ * unit.shard_numel, last = first + unit.shard_numel;
    for (size_t i = 0; i < unit.names.size(); ++i) {
      const int64_t begin = std::max(first, unit.offsets[i]);
      const int64_t end = std::min(last, unit.offsets[i] + unit.numels[i]);
      if (begin >= end) continue;
      slices.push_back(Slice{int64_t(u), unit.names[i], unit.shapes[i], begin - unit.offsets[i],
                             end - unit.offsets[i], begin - first});
    }
  }
  return slices;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> Fsdp::ParameterShapes() const {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const auto& unit : units_) {
    for (size_t i = 0; i < unit->names.size(); ++i)
      shapes.emplace_back(unit->names[i], unit->shapes[i]);
  }
  return shapes;
}

std::string Fsdp::Describe() const {
  int64_t params = 0, local = 0;
  for (const auto& unit : units_) {
    params += unit->numel;
    local += unit->shard_numel;
  }
  const char* reshard = ChoiceName(options_.reshard);
  return absl::StrFormat(
      "fsdp over %d ranks (replicas %d): %d units, %d parameters, %d per rank; gathers in %s, "
      "reduces in %s, reshard_after_forward %s",
      group_size_, comm_.mesh().replicate(), units_.size(), params, local,
      DtypeName(options_.param_dtype), DtypeName(options_.reduce_dtype), reshard);
}

}  // namespace ringtrain
