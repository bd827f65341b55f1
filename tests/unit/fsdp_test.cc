// Fsdp on ranks as threads (Gloo): a three-unit network whose loss is summed over the ranks,
// sharded over the FSDP group, against the same network replicated on one thread.
#include "worker/engine/parallel/fsdp.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "tests/unit/thread_world.h"
#include "worker/engine/model/initial_values.h"
#include "worker/engine/model/llama.h"

namespace ringtrain {
namespace {

// Units: 0 = {w0 (6, 5)}, 1 = {w1 (6, 6), b1 (6)}, 2 = {w2 (3, 6)}: 5 + 36 + 6 elements are
// no multiple of the group sizes, so every unit is padded.
// Each draw has its own generator: the ranks are threads, and the global one is shared.
std::vector<NamedTensors> MakeUnits() {
  at::Generator g = at::detail::createCPUGenerator(7);
  return {{{"w0", torch::randn({6, 5}, g)}},
          {{"w1", torch::randn({6, 6}, g)}, {"b1", torch::randn({6}, g)}},
          {{"w2", torch::randn({3, 6}, g)}}};
}

at::Tensor InputOf(int64_t rank) {
  return torch::randn({4, 5}, at::detail::createCPUGenerator(100 + rank));
}

// The network on weights given unit by unit: tanh(x w0ᵀ) → tanh(h w1ᵀ + b1) → (h w2ᵀ)² summed.
at::Tensor Loss(const at::Tensor& x, const std::function<std::vector<at::Tensor>(int64_t)>& gather,
                const std::function<at::Tensor(int64_t, at::Tensor)>& after) {
  std::vector<at::Tensor> w = gather(0);
  at::Tensor h = after(0, torch::tanh(at::linear(x, w[0])));
  w = gather(1);
  h = after(1, torch::tanh(at::linear(h, w[0], w[1])));
  w = gather(2);
  return after(2, at::linear(h, w[0]).pow(2).sum());
}

// The replicated reference: the loss summed over `world` ranks' inputs, and its gradients.
NamedTensors ReferenceGradients(int64_t world) {
  std::vector<NamedTensors> units = MakeUnits();
  for (auto& unit : units) {
    for (auto& [name, t] : unit) t.requires_grad_(true);
  }
  auto gather = [&](int64_t u) {
    std::vector<at::Tensor> w;
    for (auto& named : units[u]) w.push_back(named.second);
    return w;
  };
  auto after = [](int64_t, at::Tensor t) { return t; };
  at::Tensor total = torch::zeros({});
  for (int64_t r = 0; r < world; ++r) total = total + Loss(InputOf(r), gather, after);
  total.backward();
  NamedTensors grads;
  for (auto& unit : units) {
    for (auto& [name, t] : unit) grads.emplace_back(name, t.grad().clone());
  }
  return grads;
}

Mesh Sharded(int64_t world, int64_t shard, int64_t cp) {
  return Mesh{0, world, world / cp, cp, shard, /*sharded=*/true};
}

// Each rank's gradients of the sharded run, gathered to full tensors.
std::vector<NamedTensors> ShardedGradients(const Mesh& mesh, FsdpOptions options,
                                           bool staged = false) {
  std::vector<NamedTensors> out(mesh.world);
  RunOnMesh(
      mesh,
      [&](int64_t rank, Communicator& comm) {
        auto fsdp = Fsdp::Create(MakeUnits(), comm, options);
        at::Tensor loss = Loss(
            InputOf(rank), [&](int64_t u) { return fsdp->Gather(u, false); },
            [&](int64_t u, at::Tensor t) { return fsdp->AfterForward(u, t, false); });
        loss.backward();
        fsdp->FinishGradients();
        std::vector<at::Tensor> grads;
        for (const at::Tensor& shard : fsdp->shard_tensors()) grads.push_back(shard.grad());
        out[rank] = fsdp->GatherFull(grads);
      },
      staged);
  return out;
}

void ExpectNear(const NamedTensors& got, const NamedTensors& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_TRUE(torch::allclose(got[i].second, want[i].second, tolerance, tolerance))
        << got[i].first << ": max diff "
        << (got[i].second - want[i].second).abs().max().item<double>();
  }
}

TEST(FsdpTest, GradientsEqualTheReplicatedOnesOnEveryMesh) {
  const NamedTensors reference = ReferenceGradients(4);
  for (const Mesh& mesh :
       {Sharded(4, 4, 1), Sharded(4, 2, 2), Sharded(4, 1, 4), Sharded(4, 2, 1)}) {
    SCOPED_TRACE(mesh.Describe());
    const std::vector<NamedTensors> grads = ShardedGradients(mesh, FsdpOptions{});
    for (const NamedTensors& rank_grads : grads) ExpectNear(rank_grads, reference, 1e-5);
  }
}

TEST(FsdpTest, EveryReshardPolicyAndHostStagingGiveTheSameGradients) {
  const std::vector<NamedTensors> base = ShardedGradients(Sharded(4, 2, 2), FsdpOptions{});
  for (ReshardAfterForward reshard : {ReshardAfterForward::kAlways, ReshardAfterForward::kNever}) {
    FsdpOptions options;
    options.reshard = reshard;
    const std::vector<NamedTensors> grads = ShardedGradients(Sharded(4, 2, 2), options);
    for (int64_t r = 0; r < 4; ++r) ExpectNear(grads[r], base[r], 0);  // bitwise
  }
  const std::vector<NamedTensors> staged = ShardedGradients(Sharded(4, 2, 2), FsdpOptions{}, true);
  for (int64_t r = 0; r < 4; ++r) ExpectNear(staged[r], base[r], 0);
}

TEST(FsdpTest, ForwardFreesGatheredUnitsByPolicy) {
  for (ReshardAfterForward reshard :
       {ReshardAfterForward::kDefault, ReshardAfterForward::kAlways, ReshardAfterForward::kNever}) {
    RunOnMesh(Sharded(2, 2, 1), [&](int64_t rank, Communicator& comm) {
      FsdpOptions options;
      options.reshard = reshard;
      auto fsdp = Fsdp::Create(MakeUnits(), comm, options);
      std::vector<std::vector<at::Tensor>> views;
      Loss(
          InputOf(rank),
          [&](int64_t u) {
            views.push_back(fsdp->Gather(u, false));
            return views.back();
          },
          [&](int64_t u, at::Tensor t) { return fsdp->AfterForward(u, t, false); });
      // A freed unit's views have no memory until its backward gathers it again.
      for (int64_t u = 0; u < 3; ++u) {
        const bool freed = reshard == ReshardAfterForward::kAlways ||
                           (reshard == ReshardAfterForward::kDefault && u < 2);
        EXPECT_EQ(views[u][0].storage().nbytes() == 0, freed)
            << "unit " << u << " policy " << int(reshard);
      }
    });
  }
}

// Each rank's slices hold exactly its shard's elements of each parameter, and the ranks' slices
// tile every parameter once (the padding belongs to none): what sharded checkpoints write and read.
TEST(FsdpTest, LocalSlicesTileEveryParameterWithTheShardsValues) {
  const std::vector<NamedTensors> original = MakeUnits();
  std::map<std::string, at::Tensor> by_name;
  for (const auto& unit : original) {
    for (const auto& [name, t] : unit) by_name[name] = t.detach().clone().reshape(-1);
  }
  std::mutex mu;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> ranges;
  RunOnMesh(Sharded(4, 4, 1), [&](int64_t, Communicator& comm) {
    auto fsdp = Fsdp::Create(MakeUnits(), comm, FsdpOptions{});
    for (const Fsdp::Slice& slice : fsdp->LocalSlices()) {
      const at::Tensor mine = fsdp->shard_tensors()[slice.unit].detach().narrow(
          0, slice.shard_offset, slice.end - slice.begin);
      EXPECT_TRUE(torch::equal(
          mine, by_name.at(slice.name).narrow(0, slice.begin, slice.end - slice.begin)))
          << slice.name;
      std::lock_guard<std::mutex> lock(mu);
      ranges[slice.name].emplace_back(slice.begin, slice.end);
    }
  });
  ASSERT_EQ(ranges.size(), by_name.size());
  for (auto& [name, r] : ranges) {
    std::sort(r.begin(), r.end());
    int64_t next = 0;
    for (const auto& [begin, end] : r) {
      EXPECT_EQ(begin, next) << name;
      next = end;
    }
    EXPECT_EQ(next, by_name.at(name).numel()) << name;
  }
}

TEST(FsdpTest, GathersInTheParamDtype) {
  RunOnMesh(Sharded(2, 2, 1), [&](int64_t, Communicator& comm) {
    FsdpOptions options;
    options.param_dtype = at::kBFloat16;
    auto fsdp = Fsdp::Create(MakeUnits(), comm, options);
    const std::vector<at::Tensor> w = fsdp->Gather(1, false);
    EXPECT_EQ(w[0].scalar_type(), at::kBFloat16);
    EXPECT_TRUE(torch::equal(w[0], MakeUnits()[1][0].second.to(at::kBFloat16)));
    EXPECT_EQ(fsdp->shard_tensors()[1].scalar_type(), at::kFloat);  // float32 master shards
  });
}

TEST(FsdpTest, BfloatReduceStaysCloseToFloat) {
  const NamedTensors reference = ReferenceGradients(4);
  FsdpOptions options;
  options.reduce_dtype = at::kBFloat16;
  const std::vector<NamedTensors> grads = ShardedGradients(Sharded(4, 2, 1), options);
  // bf16 keeps 8 significant bits: each summand and the sums round to ~0.4 % of their size.
  for (size_t i = 0; i < reference.size(); ++i) {
    const double scale = reference[i].second.abs().max().item<double>();
    const double diff = (grads[0][i].second - reference[i].second).abs().max().item<double>();
    EXPECT_LT(diff, 0.02 * scale) << reference[i].first;
    EXPECT_GT(diff, 0) << reference[i].first << ": bf16 reduction should round something";
  }
}

// Two micro-batches per rank (InputOf(rank), then InputOf(rank + 10)): each rank's gradients,
// gathered to full tensors, and the bytes it sent in the backwards. `once`: gradient sync off for
// the first micro-batch (FSDP2's set_requires_gradient_sync), so each unit reduce-scatters once.
struct Accumulated {
  std::vector<NamedTensors> grads;
  std::vector<int64_t> backward_bytes;
};
Accumulated AccumulatedGradients(const Mesh& mesh, bool once) {
  Accumulated out{std::vector<NamedTensors>(mesh.world), std::vector<int64_t>(mesh.world)};
  RunOnMesh(mesh, [&](int64_t rank, Communicator& comm) {
    auto fsdp = Fsdp::Create(MakeUnits(), comm, FsdpOptions{});
    int64_t in_backward = 0;  // bytes sent by the backwards: gathers again, reduce-scatters
    for (int64_t m = 0; m < 2; ++m) {
      fsdp->SetGradientSync(!once || m == 1);
      at::Tensor loss = Loss(
          InputOf(rank + 10 * m), [&](int64_t u) { return fsdp->Gather(u, false); },
          [&](int64_t u, at::Tensor t) { return fsdp->AfterForward(u, t, false); });
      const int64_t sent = comm.stats().bytes_sent;
      loss.backward();
      in_backward += comm.stats().bytes_sent - sent;
    }
    fsdp->FinishGradients();
    out.backward_bytes[rank] = in_backward;
    std::vector<at::Tensor> grads;
    for (const at::Tensor& shard : fsdp->shard_tensors()) grads.push_back(shard.grad());
    out.grads[rank] = fsdp->GatherFull(grads);
  });
  return out;
}

// Reduced once per step, the gradients are those of a reduce-scatter per micro-batch (to float32
// rounding: the micro-batches are summed before the ranks instead of after), and each backward's
// bytes are halved or less (only the second micro-batch's backward reduce-scatters).
TEST(FsdpTest, GradientSyncOncePerStepGivesTheGradientsOfEveryMicroBatchsSync) {
  for (const Mesh& mesh : {Sharded(4, 4, 1), Sharded(4, 2, 2)}) {
    SCOPED_TRACE(mesh.Describe());
    const Accumulated every = AccumulatedGradients(mesh, /*once=*/false);
    const Accumulated once = AccumulatedGradients(mesh, /*once=*/true);
    for (int64_t r = 0; r < mesh.world; ++r) {
      ExpectNear(once.grads[r], every.grads[r], 1e-6);
      EXPECT_LT(once.backward_bytes[r], every.backward_bytes[r]) << "rank " << r;
    }
    // The same run twice: bitwise.
    const Accumulated again = AccumulatedGradients(mesh, /*once=*/true);
    for (int64_t r = 0; r < mesh.world; ++r) ExpectNear(again.grads[r], once.grads[r], 0);
  }
}

// A gradient held with sync off must be reduced by a later backward before the step finishes.
TEST(FsdpTest, FinishingWithAnUnreducedGradientIsRefused) {
  RunOnMesh(Sharded(2, 2, 1), [&](int64_t rank, Communicator& comm) {
    auto fsdp = Fsdp::Create(MakeUnits(), comm, FsdpOptions{});
    fsdp->SetGradientSync(false);
    Loss(
        InputOf(rank), [&](int64_t u) { return fsdp->Gather(u, false); },
        [&](int64_t u, at::Tensor t) { return fsdp->AfterForward(u, t, false); })
        .backward();
    EXPECT_THROW(fsdp->FinishGradients(), c10::Error);
  });
}

// A model that is never materialized, sharded with the initial-value function: at shard 1, 2 and 4
// (and over shard × cp) the gathered weights are bitwise those of the materialized model's
// init_weights — no rank held a whole parameter.
TEST(FsdpTest, ShardedInitGivesBitwiseTheReplicatedInitialWeights) {
  ModelArgs args;
  args.dim = 64;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 97;
  args.max_seq_len = 32;
  Transformer whole(args);
  whole->init_weights(/*seed=*/42);
  NamedTensors want;
  for (const auto& item : whole->named_parameters()) want.emplace_back(item.key(), item.value());
  for (const Mesh& mesh :
       {Sharded(1, 1, 1), Sharded(2, 2, 1), Sharded(4, 4, 1), Sharded(4, 2, 2)}) {
    SCOPED_TRACE(mesh.Describe());
    RunOnMesh(mesh, [&](int64_t, Communicator& comm) {
      Transformer model(args, /*materialize=*/false);
      EXPECT_TRUE(model->parameters()[0].is_meta());
      auto fsdp = Fsdp::Create(
          model->Units(), comm, FsdpOptions{},
          [&](const std::string& name, int64_t begin, int64_t end, const at::Tensor& out) {
            FillInitialValues(name, args, 42, begin, end, out);
          });
      ExpectNear(fsdp->GatherFull(fsdp->shard_tensors()), want, 0);
    });
  }
}

}  // namespace
}  // namespace ringtrain
