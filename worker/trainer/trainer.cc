#include "worker/trainer/trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/config/lr_phases.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/trainer_exit.h"
#include "common/status_macros.h"
#include "worker/engine/kernels/fused_cpu_attention.h"
#include "worker/engine/parallel/ring_attention.h"
#include "worker/trainer/trainer_state.h"
#ifdef RINGTRAIN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ringtrain {
namespace trainer_internal {

absl::Status Guarded(Trainer::State& s, const std::string& what,
                     const std::function<absl::Status()>& f) {
  const std::string where = s.comm ? absl::StrCat(" on ", s.mesh.Describe()) : "";
  std::string comm_error;
  try {
    return f();
  } catch (const CommError& e) {
    comm_error = e.what();
  } catch (const c10::DistError& e) {
    comm_error = e.what_without_backtrace();
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " failed", where, ": out of memory: ", e.what_without_backtrace()));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, " failed", where, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, " failed", where, ": ", e.what()));
  }
  // A failed collective: add which rank was lost, so the message names the peer, not a socket.
  std::string diagnosis;
  if (s.comm) diagnosis = absl::StrCat("; ", s.comm->DiagnoseFailure());
  return MarkPeerLost(
      absl::UnavailableError(absl::StrCat(what, " failed", where, ": ", comm_error, diagnosis)));
}

}  // namespace trainer_internal

namespace {

using trainer_internal::Guarded;
using trainer_internal::LoadShardedOptimizerState;
using trainer_internal::ShardModel;

// `micro_batches` = A: a step reads dp × A × local_batch_size windows.
DatasetSpec TrainingDataSpec(const JobConfig& c, int64_t dp, int64_t micro_batches) {
  DatasetSpec spec;
  spec.kind = c.training.dataset;
  spec.path = c.training.dataset_path;
  spec.token_dtype = c.training.token_dtype;
  spec.tokenizer_path = c.training.tokenizer_path;
  spec.vocab_size = c.model.vocab_size;
  spec.seed = static_cast<uint64_t>(c.training.seed);
  spec.min_tokens =
      c.training.steps * dp * micro_batches * c.training.local_batch_size * c.training.seq_len + 1;
  return spec;
}

DatasetSpec ValidationDataSpec(const JobConfig& c, int64_t dp) {
  DatasetSpec spec = TrainingDataSpec(c, dp, /*micro_batches=*/1);
  if (c.validation.dataset.has_value()) spec.kind = *c.validation.dataset;
  if (!c.validation.dataset_path.empty()) spec.path = c.validation.dataset_path;
  // Synthetic validation data: held-out walks on the training source.
  spec.sample_stream = 1;
  spec.min_tokens = c.validation.steps * dp * c.validation.local_batch_size * c.training.seq_len + 1;
  return spec;
}

// Every rank must resume from the same checkpoint: ranks whose checkpoint folders are not the same
// storage (a restart that moved ranks to other hosts) would otherwise start from different steps
// and train on silently. FAILED_PRECONDITION naming what each rank found.
absl::Status CheckSameCheckpoint(Trainer::State& s, std::optional<int64_t> latest) {
  std::vector<std::vector<double>> found;
  RT_RETURN_IF_ERROR(Guarded(s, "comparing checkpoints across ranks", [&]() -> absl::Status {
    found = s.comm->AllGatherDoubles({latest ? double(*latest) : -1.0});
    return absl::OkStatus();
  }));
  std::vector<std::string> seen;
  bool same = true;
  for (size_t r = 0; r < found.size(); ++r) {
    same &= found[r][0] == found[0][0];
    seen.push_back(absl::StrCat("rank ", r, ": ",
                                found[r][0] < 0 ? "none" : absl::StrCat("step ", found[r][0])));
  }
  if (same) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the ranks see different checkpoints in checkpoint.folder = \"", s.config.checkpoint.folder,
      "\" (", absl::StrJoin(seen, ", "), "): every rank must read the same folder, so on several "
      "hosts it must be shared storage (the agents' --checkpoint-root)"));
}

}  // namespace

Trainer::Trainer(std::unique_ptr<State> state) : state_(std::move(state)) {}
Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const JobConfig& config,
                                                         const MeshDegrees& degrees,
                                                         RankInfo rank) {
  auto s = std::make_unique<State>();
  s->config = config;
  s->rank = rank;
  const bool eval = config.job.mode == JobMode::kEval;
  const int64_t dp = degrees.dp();
  const int64_t micro_batches = eval ? 1 : degrees.accumulation;
  s->mesh = Mesh{rank.rank, rank.world_size, dp, degrees.cp, degrees.shard, degrees.sharded};
  // "cuda" is the process's current device at start, cuda:0; an index makes the device explicit
  // for everything keyed by it (allocator statistics, NCCL's communicators).
  const bool cuda = rank.device.type == DeviceType::kCuda;
  s->device = c10::Device(cuda ? c10::kCUDA : c10::kCPU,
                          static_cast<c10::DeviceIndex>(cuda ? std::max(rank.device.index, 0) : -1));
  RT_RETURN_IF_ERROR(Communicator::CheckDeviceSupported(s->device));
#ifdef RINGTRAIN_WITH_CUDA
  // The current device for this process: cuBLAS handles, NCCL communicators and streams bind to it.
  if (cuda) c10::cuda::set_device(s->device.index());
#endif
  RT_RETURN_IF_ERROR(Communicator::CheckBackend(config.comm.backend, s->device));
  if (rank.world_size > 1) {
    RendezvousOptions rendezvous{
        rank.master_addr, rank.master_port,
        std::chrono::milliseconds(int64_t(config.comm.timeout_seconds * 1000)), s->device,
        config.comm.backend};
    RT_ASSIGN_OR_RETURN(s->comm, Communicator::Create(s->mesh, rendezvous));
    RT_LOG(Info) << "joined " << s->mesh.Describe() << " via " << rank.master_addr << ":"
                 << rank.master_port << " (collectives: " << s->comm->DescribeBackend() << ")";
  }
  {
    const progress::ScopedPhase io(progress::Phase::kIo);
    RT_ASSIGN_OR_RETURN(s->dataset, OpenDataset(eval ? ValidationDataSpec(config, dp)
                                                     : TrainingDataSpec(config, dp, micro_batches)));
  }
  RT_LOG(Info) << "data: " << s->dataset->Describe();
  if (s->dataset->entropy_rate_nats() >= 0) {
    RT_LOG(Info) << absl::StrFormat(
        "entropy floor of the synthetic source: %.4f nats/token (the best loss any model can reach)",
        s->dataset->entropy_rate_nats());
  }
  SamplerSpec sampler_spec;
  sampler_spec.kind = eval ? SamplerKind::kSequential : config.training.sampler;
  sampler_spec.seq_len = config.training.seq_len;
  sampler_spec.local_batch_size =
      eval ? config.validation.local_batch_size : config.training.local_batch_size;
  sampler_spec.micro_batches = micro_batches;
  sampler_spec.dp_degree = dp;
  sampler_spec.seed = static_cast<uint64_t>(config.training.seed);
  RT_ASSIGN_OR_RETURN(WindowSampler sampler, WindowSampler::Create(s->dataset.get(), sampler_spec));
  s->sampler.emplace(std::move(sampler));
  if (micro_batches > 1 && rank.rank == 0) {
    RT_LOG(Info) << "gradient accumulation: " << micro_batches << " micro-batches of "
                 << config.training.local_batch_size;
  }

  RT_RETURN_IF_ERROR(Guarded(*s, "building the model", [&]() -> absl::Status {
    // Flush-to-zero / denormals-are-zero on every thread that computes: a softmax that grows
    // peaky or AdamW's tiny second moments would otherwise run into slow denormal arithmetic.
    FlushDenormalsOnComputeThreads();
    torch::manual_seed(static_cast<uint64_t>(config.training.seed));
    s->model = Transformer(ModelArgs::FromConfig(config.model));
    s->model->init_weights();
    // The attention plan, chosen once: local attention, or ring attention across the CP group;
    // each with the block kernel training.attention_kernel picks for the device.
    const AttentionKernelKind kind = config.training.attention_kernel;
    if (s->mesh.cp > 1) {
      auto ring = std::make_shared<RingAttentionKernel>(
          s->comm.get(), config.training.seq_len, config.parallelism.context_parallel_load_balancer,
          config.parallelism.context_parallel_rotate_method, kind);
      RT_LOG(Info) << "attention: ring over cp " << s->mesh.cp << ", blocks "
                   << ring->block_kernel().Describe();
      s->attention = std::move(ring);
    } else {
      auto local = std::make_shared<LocalAttentionKernel>(MakeBlockKernel(kind, s->device));
      RT_LOG(Info) << "attention: local, " << local->block_kernel().Describe();
      s->attention = std::move(local);
    }
    s->model->SetAttentionKernel(s->attention);
    if (config.training.mixed_precision_param == MixedPrecision::kBFloat16) {
      s->model->SetComputeDtype(at::kBFloat16);
      RT_LOG(Info) << "mixed precision: bfloat16 compute, float32 master weights and optimizer "
                      "state, float32 softmax statistics and merges";
    }
    const ActivationCheckpointSection& ac = config.activation_checkpoint;
    s->model->SetActivationCheckpoint(ActivationCheckpointEvery(config));
    RT_LOG(Info) << "activation checkpointing: " << ChoiceName(ac.mode)
                 << (ac.mode == AcMode::kSelective ? " " + ac.selective_ac_option : "");
    if (config.training.mixed_precision_reduce == MixedPrecision::kBFloat16 && s->comm) {
      RT_LOG(Info) << "mixed precision: gradients reduced in bfloat16, widened back to float32";
    }
    // Initialised on the CPU (the same weights whatever the device), then moved.
    s->model->to(s->device);
    for (auto& p : s->model->parameters()) s->params.push_back(p);
    return absl::OkStatus();
  }));
  RT_LOG(Info) << absl::StrFormat(
      "model: %d parameters, dim %d, %d layers, %d heads (%d kv), ffn %d, vocab %d",
      ParameterCount(s->model->args()), config.model.dim, config.model.n_layers,
      config.model.n_heads, config.model.n_kv_heads, s->model->args().ffn_hidden_dim(),
      config.model.vocab_size);
  const progress::ScopedPhase loading(progress::Phase::kIo);  // weights and checkpoints
  if (!config.checkpoint.initial_load_path.empty()) {
    RT_ASSIGN_OR_RETURN(StateDict weights, ReadStateDict(config.checkpoint.initial_load_path));
    RT_RETURN_IF_ERROR(
        LoadModelWeights(*s->model, weights, config.checkpoint.initial_load_path));
    RT_LOG(Info) << "loaded initial weights from " << config.checkpoint.initial_load_path;
  }

  // A checkpoint's model is loaded into the full model, before FSDP shards it.
  std::optional<Checkpoint> resume;
  if (config.checkpoint.enable && !eval) {
    s->checkpoints.emplace(config.checkpoint.folder, config.checkpoint.keep_latest_k);
    RT_ASSIGN_OR_RETURN(std::optional<int64_t> latest, s->checkpoints->LatestStep());
    if (s->comm) RT_RETURN_IF_ERROR(CheckSameCheckpoint(*s, latest));
    if (latest) {
      RT_ASSIGN_OR_RETURN(resume, s->checkpoints->Load(*latest));
      RT_RETURN_IF_ERROR(
          LoadModelWeights(*s->model, resume->model, s->checkpoints->StepPath(*latest)));
    }
  }
  if (s->mesh.sharded) {
    RT_RETURN_IF_ERROR(Guarded(*s, "sharding the model", [&] { return ShardModel(*s); }));
  }

  AdamWOptions adam{config.optimizer.lr, config.optimizer.beta1, config.optimizer.beta2,
                    config.optimizer.eps, config.optimizer.weight_decay};
  std::vector<std::pair<std::string, at::Tensor>> named_params;
  if (s->fsdp) {
    named_params = s->fsdp->shards();
  } else {
    for (const auto& item : s->model->named_parameters()) {
      named_params.emplace_back(item.key(), item.value());  // not detached: Step reads .grad()
    }
  }
  s->optimizer = std::make_unique<AdamW>(std::move(named_params), adam);
  // Phases longer than the run are clamped (by LrSchedule too); say so where the user looks.
  const LrPhases phases = ResolveLrPhases(config);
  for (const std::string& warning : phases.warnings) RT_LOG(Warning) << warning;
  s->schedule.emplace(LrScheduleOptions{config.optimizer.lr, config.training.steps,
                                        config.lr_scheduler.warmup_steps,
                                        config.lr_scheduler.decay_ratio,
                                        config.lr_scheduler.decay_type,
                                        config.lr_scheduler.min_lr_factor});

  const bool resumed = resume.has_value();
  if (resumed) {
    const std::string path = s->checkpoints->StepPath(resume->train_state.step);
    RT_RETURN_IF_ERROR(s->fsdp ? LoadShardedOptimizerState(*s, resume->optimizer, path)
                               : s->optimizer->LoadStateDict(resume->optimizer));
    s->train_state = resume->train_state;
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(resume->train_state.rng_state);
    RT_LOG(Info) << "resumed from " << path << " (step " << s->train_state.step << ")";
  }
  // Rank 0 writes the step records. With $RINGTRAIN_JSONL_EVERY_RANK=1 (the agent sets it, and
  // gives each rank its own path) every rank writes them, so each rank's agent can export its
  // own rank's figures; the records are the same on every rank.
  s->every_rank_writes_jsonl = std::getenv("RINGTRAIN_JSONL_EVERY_RANK") != nullptr &&
                               std::string(std::getenv("RINGTRAIN_JSONL_EVERY_RANK")) == "1";
  if (!config.metrics.jsonl.empty() && (rank.rank == 0 || s->every_rank_writes_jsonl)) {
    RT_RETURN_IF_ERROR(s->jsonl.Open(config.metrics.jsonl, /*append=*/resumed));
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(s)));
}

absl::Status Trainer::Run() {
  return state_->config.job.mode == JobMode::kEval ? Evaluate() : Train();
}

}  // namespace ringtrain
