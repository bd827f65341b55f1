// Sharded data parallelism (FSDP2 / ZeRO-3 semantics) over the mesh's FSDP group — the shard × cp
// ranks of one replica (mesh.h). A ParamSource (model/param_source.h): the model takes every unit's
// weights from here.
//
// Per unit (the embedding, each transformer block, the final norm + output), the unit's float32
// parameters are one flat buffer padded to a multiple of the group size F and cut into F equal
// shards; this rank keeps shard fsdp_rank as a float32 leaf tensor — the optimizer's parameter
// (AdamW's master weights and state are per shard, 1/F of the model each). The module's own
// parameters are freed.
//
//   forward   Gather(u): the unit's full parameters, all-gathered in the param dtype (cast before
//             the gather) into one buffer; unit u + 1's all-gather is issued asynchronously
//             before u computes. AfterForward(u) frees the buffer (reshard_after_forward: default =
//             every unit but the last, whose backward comes next; always; never) and wraps the
//             output so that its backward gathers u again — and issues u − 1's gather — before u's
//             backward runs.
//   backward  once every use of u's parameters has its gradient, they are flattened in the reduce
//             dtype and reduce-scattered to their owners (a sum over the group, the loss being
//             divided by the global token count as in the replicated path); the gathered buffer
//             is freed. The reduce-scatter runs while the backward goes on: it is waited for at
//             the next unit's backward (or FinishGradients), then widened to float32 and added
//             into the shard's .grad — one reduce-scatter in flight at a time.
//             With gradient sync off (SetGradientSync(false), FSDP2's set_requires_gradient_sync:
//             every micro-batch of a step but the last) no reduce-scatter runs: the unit's full
//             gradient is added into a float32 buffer it holds, and the next backward with sync on
//             adds its own and reduce-scatters the sum — one reduce-scatter per unit per step, at
//             the memory of an unsharded float32 gradient held between the micro-batches.
//   then      FinishGradients all-reduces every shard's gradient over the replicas (reduce dtype).
//
// Buffers are freed by releasing their storage's memory, not the tensor: the autograd graph keeps
// views of them, which are filled again before they are read (FSDP2's storage resize).
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_FSDP_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_FSDP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Tensor.h>

#include "common/config/choices.h"
#include "worker/engine/model/param_source.h"
#include "worker/engine/parallel/comm.h"

namespace ringtrain {

struct FsdpOptions {
  c10::ScalarType param_dtype = c10::ScalarType::Float;   // training.mixed_precision_param
  c10::ScalarType reduce_dtype = c10::ScalarType::Float;  // training.mixed_precision_reduce
  ReshardAfterForward reshard = ReshardAfterForward::kDefault;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class Fsdp : public ParamSource, public std::enable_shared_from_this<Fsdp> {
 public:
  // Shards `units` (per unit, its (name, float32 parameter) list in forward order, as
  // TransformerImpl::Units() gives them; identical on every rank of the group) over
  // comm.fsdp_group(), keeping this rank's shards, and frees the parameters' memory.
  //
  // With `init`, the units' tensors are only shapes (they may be on the meta device, holding no
  // memory): each rank allocates its shards on comm's device and `init` fills each of its slices
  // (parameter name, elements [begin, end), a float32 CPU tensor of end - begin elements), so no
  // rank ever holds a whole parameter.
  using SliceInitializer = std::function<void(const std::string& name, int64_t begin, int64_t end,
                                              const at::Tensor& out)>;
  static std::shared_ptr<Fsdp> Create(const std::vector<NamedTensors>& units, Communicator& comm,
                                      FsdpOptions options, const SliceInitializer& init = {});

  // This rank's float32 shards, one per unit ("fsdp.unit<u>"): the optimizer's parameters.
  const NamedTensors& shards() const { return shards_; }
  std::vector<at::Tensor> shard_tensors() const;
  int64_t replicate_rank() const { return comm_.mesh().replicate_rank(); }
  int64_t group_size() const { return group_size_; }

  std::vector<at::Tensor> Gather(int64_t unit, bool recompute) override;
  at::Tensor AfterForward(int64_t unit, const at::Tensor& output, bool recompute) override;

  // Whether the backwards that follow reduce-scatter their gradients (on by default) or hold them
  // unsharded until a backward with sync on. Off only between the micro-batches of one step: a
  // held gradient must be reduced before FinishGradients.
  void SetGradientSync(bool sync) { gradient_sync_ = sync; }
  // After a step failed part-way: every unit resharded, held gradients and transfers in flight
  // dropped (not waited for: their group is gone), gradient sync on.
  void AbandonStep();

  // After the step's last backward: waits for the reduce-scatter in flight, then sums every shard's
  // gradient over the replicas (a zero gradient first for a unit that got none, so every rank
  // contributes the same layout).
  void FinishGradients();
  // Sum of `value` over the FSDP group (float64): the squared gradient norms of the shards.
  double SumOverGroup(double value);

  // The full float32 tensors of every parameter (name → full shape), assembled from per-unit flat
  // shards `per_unit` (shards() order; the shards themselves, or gradients or optimizer state
  // shaped like them). A collective over the group: every rank calls it and gets the whole dict.
  NamedTensors GatherFull(const std::vector<at::Tensor>& per_unit);
  // This rank's part of one parameter: elements [begin, end) of `name` flattened are elements
  // [shard_offset, shard_offset + end - begin) of unit `unit`'s shard (the padding at a unit's end
  // belongs to no parameter).
  struct Slice {
    int64_t unit = 0;
    std::string name;
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;
    int64_t shard_offset = 0;
  };
  // Every non-empty slice this rank holds, in unit and parameter order.
  std::vector<Slice> LocalSlices() const;
  // Every parameter's name and full shape, in unit order.
  std::vector<std::pair<std::string, std::vector<int64_t>>> ParameterShapes() const;

  // "fsdp over 4 ranks: 5 units, 1.2 M parameters, 0.30 M per rank, gathers in bfloat16, ..."
  std::string Describe() const;

  struct Unit;  // fsdp.cc

 private:
  Fsdp(Communicator& comm, FsdpOptions options);
  // Issues unit u's all-gather (no-op when gathered or in flight).
  void StartGather(int64_t unit);
  // Unit u gathered: waits for its all-gather, or issues and waits for one.
  void EnsureGathered(int64_t unit);
  void Free(int64_t unit);
  bool ReshardsAfterForward(int64_t unit) const;
  // Waits for the reduce-scatter in flight, if any, and adds its result into its shard's .grad.
  void FinishReduce();
  friend class UnshardFunction;
  friend class PreBackwardFunction;

  Communicator& comm_;
  FsdpOptions options_;
  int64_t group_size_ = 1;
  int64_t group_rank_ = 0;
  std::vector<std::shared_ptr<Unit>> units_;
  NamedTensors shards_;
  // The reduce-scatter in flight: its unit, its input (kept alive until it completes), the
  // shard-sized output, the work.
  struct PendingReduce {
    int64_t unit = -1;
    at::Tensor flat, mine;
    std::optional<PendingWork> work;
  };
  PendingReduce in_flight_;
  bool gradient_sync_ = true;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_FSDP_H_
