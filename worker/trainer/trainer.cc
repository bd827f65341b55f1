#include "worker/trainer/trainer.h"

#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/config/lr_phases.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/status_macros.h"
#include "common/trainer_exit.h"
#include "worker/engine/kernels/cpu_isa.h"
#include "worker/engine/kernels/denormals.h"
#include "worker/engine/serialize/torch_save_reader.h"
#include "worker/trainer/heal.h"
#include "worker/trainer/tensor_memory.h"
#include "worker/trainer/trainer_state.h"
#include "worker/trainer/validation.h"
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
    return absl::InternalError(
        absl::StrCat(what, " failed", where, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, " failed", where, ": ", e.what()));
  }
  // A failed collective: add which rank was lost, so the message names the peer, not a socket.
  std::string diagnosis;
  if (s.comm) {
    diagnosis =
        absl::StrCat("; ", s.comm->DiagnoseFailure([&s] { return HealInstructionCame(s); }));
  }
  return MarkPeerLost(
      absl::UnavailableError(absl::StrCat(what, " failed", where, ": ", comm_error, diagnosis)));
}

}  // namespace trainer_internal

void trainer_internal::OpenCheckpointWriter(Trainer::State& s) {
  const CheckpointSection& c = s.config.checkpoint;
  s.checkpoints.emplace(c.folder, c.keep_latest_k);
  const std::string tag = absl::StrFormat("%.0f-%.0f", s.tag_pid, s.tag_ms);
  if (s.rank.rank == 0 && s.generation == 0) s.checkpoints->RemoveIncomplete(tag);
  CheckpointWriterOptions options;
  options.rank = s.rank.rank;
  options.writers = s.gradients->checkpoint_writers();
  options.tag = tag;
  options.async = c.async_mode == AsyncMode::kAsync;
  options.commit_timeout = absl::Seconds(s.config.comm.timeout_seconds);
  s.checkpoint_writer = std::make_unique<CheckpointWriter>(*s.checkpoints, options);
}

DatasetSpec trainer_internal::TrainingDataSpec(const JobConfig& c, int64_t dp,
                                               int64_t micro_batches) {
  DatasetSpec spec;
  spec.kind = c.training.dataset;
  spec.path = c.training.dataset_path;
  spec.token_dtype = c.training.token_dtype;
  spec.tokenizer_path = c.training.tokenizer_path;
  spec.eos_id = c.training.eos_id;
  spec.vocab_size = c.model.vocab_size;
  spec.seed = static_cast<uint64_t>(c.training.seed);
  spec.min_tokens =
      c.training.steps * dp * micro_batches * c.training.local_batch_size * c.training.seq_len + 1;
  return spec;
}

namespace {

using trainer_internal::Guarded;
using trainer_internal::TrainingDataSpec;
using trainer_internal::ValidationDataSpec;
using trainer_internal::ValidationSamplerSpec;

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
  return absl::FailedPreconditionError(
      absl::StrCat("the ranks see different checkpoints in checkpoint.folder = \"",
                   s.config.checkpoint.folder, "\" (", absl::StrJoin(seen, ", "),
                   "): every rank must read the same folder, so on several "
                   "hosts it must be shared storage (the agents' --checkpoint-root)"));
}

// The device (the CPU, or cuda:N made the process's current device) and whether the collectives'
// backend runs on it.
absl::Status ChooseDevice(Trainer::State& s) {
  // "cuda" is the process's current device at start, cuda:0; an index makes the device explicit
  // for everything keyed by it (allocator statistics, NCCL's communicators).
  const bool cuda = s.rank.device.type == DeviceType::kCuda;
  s.device =
      c10::Device(cuda ? c10::kCUDA : c10::kCPU,
                  static_cast<c10::DeviceIndex>(cuda ? std::max(s.rank.device.index, 0) : -1));
  RT_RETURN_IF_ERROR(Communicator::CheckDeviceSupported(s.device));
#ifdef RINGTRAIN_WITH_CUDA
  // The current device for this process: cuBLAS handles, NCCL communicators and streams bind to it.
  if (cuda) c10::cuda::set_device(s.device.index());
#endif
  return Communicator::CheckBackend(s.config.comm.backend, s.device);
}

// Rendezvous with the other ranks (world > 1).
absl::Status JoinWorld(Trainer::State& s) {
  if (s.rank.world_size == 1) return absl::OkStatus();
  const CommSection& c = s.config.comm;
  RendezvousOptions rendezvous{s.rank.master_addr, s.rank.master_port,
                               std::chrono::milliseconds(int64_t(c.timeout_seconds * 1000)),
                               s.device, c.backend};
  rendezvous.snapshot_group = s.config.checkpoint.memory_interval > 0;
  RT_ASSIGN_OR_RETURN(s.comm, Communicator::Create(s.mesh, rendezvous));
  RT_LOG(Info) << "joined " << s.mesh.Describe() << " via " << s.rank.master_addr << ":"
               << s.rank.master_port << " (collectives: " << s.comm->DescribeBackend() << ")";
  return absl::OkStatus();
}

// The dataset and this dp rank's sampler over it; A = `micro_batches` per step.
absl::Status OpenData(Trainer::State& s, int64_t micro_batches) {
  const JobConfig& config = s.config;
  const bool eval = config.job.mode == JobMode::kEval;
  const int64_t dp = s.mesh.dp;
  {
    const progress::ScopedPhase io(progress::Phase::kIo);
    RT_ASSIGN_OR_RETURN(s.dataset, OpenDataset(eval ? ValidationDataSpec(config, dp)
                                                    : TrainingDataSpec(config, dp, micro_batches)));
  }
  RT_LOG(Info) << "data: " << s.dataset->Describe();
  if (s.dataset->entropy_rate_nats() >= 0) {
    RT_LOG(Info) << absl::StrFormat(
        "entropy floor of the synthetic source: %.4f nats/token (the best loss any model can "
        "reach)",
        s.dataset->entropy_rate_nats());
  }
  SamplerSpec spec = ValidationSamplerSpec(config, dp);
  if (!eval) {
    spec.kind = config.training.sampler;
    spec.local_batch_size = config.training.local_batch_size;
    spec.micro_batches = micro_batches;
  }
  RT_ASSIGN_OR_RETURN(WindowSampler sampler, WindowSampler::Create(s.dataset.get(), spec));
  s.sampler.emplace(std::move(sampler));
  if (!eval && config.validation.enable) {
    RT_RETURN_IF_ERROR(trainer_internal::OpenValidationData(s));
  }
  if (micro_batches > 1 && s.rank.rank == 0) {
    const bool once =
        s.mesh.sharded && config.parallelism.fsdp_gradient_sync == FsdpGradientSync::kStep;
    RT_LOG(Info) << "gradient accumulation: " << micro_batches << " micro-batches of "
                 << config.training.local_batch_size
                 << (once ? "; FSDP reduce-scatters once per step" : "");
  }
  return absl::OkStatus();
}

// The model with torchtitan's init from training.seed (initial_values.h: the same weights whatever
// the device and mesh), or uninitialised when initial_load_path will fill it. A sharded mesh
// builds it without materializing the parameters: each rank makes only its own shards
// (Parallelize → Fsdp::Create).
absl::Status BuildModel(Trainer::State& s) {
  const JobConfig& config = s.config;
  // The CPU kernels' level and GEMM engines, chosen once here so that a bad RINGTRAIN_CPU_ISA,
  // RINGTRAIN_F32_GEMM or RINGTRAIN_BF16_GEMM stops the start.
  try {
    const CpuIsa isa = ActiveCpuIsa();
    const F32Gemm f32_gemm = ActiveF32Gemm();
    const Bf16Gemm bf16_gemm = ActiveBf16Gemm();
    if (s.rank.rank == 0 && s.device.is_cpu()) {
      RT_LOG(Info) << "CPU kernels: " << CpuIsaName(isa)
                   << " (this CPU: " << CpuIsaName(DetectedCpuIsa()) << "); float32 GEMMs "
                   << F32GemmName(f32_gemm) << ", attention's bf16 GEMMs "
                   << Bf16GemmName(bf16_gemm);
    }
  } catch (const std::invalid_argument& e) {
    return absl::InvalidArgumentError(e.what());
  }
  RT_RETURN_IF_ERROR(Guarded(s, "building the model", [&]() -> absl::Status {
    FlushDenormalsOnComputeThreads();
    torch::manual_seed(static_cast<uint64_t>(config.training.seed));
    s.model = Transformer(ModelArgs::FromConfig(config.model), /*materialize=*/!s.mesh.sharded);
    // Initial weights to be loaded (LoadInitialWeights checks they cover every parameter) replace
    // the seed's values: no pass to draw them.
    if (!s.mesh.sharded && config.checkpoint.initial_load_path.empty()) {
      s.model->init_weights(static_cast<uint64_t>(config.training.seed));
    }
    return absl::OkStatus();
  }));
  RT_LOG(Info) << absl::StrFormat(
      "model: %d parameters, dim %d, %d layers, %d heads (%d kv), ffn %d, vocab %d",
      ParameterCount(s.model->args()), config.model.dim, config.model.n_layers,
      config.model.n_heads, config.model.n_kv_heads, s.model->args().ffn_hidden_dim(),
      config.model.vocab_size);
  return absl::OkStatus();
}

// Whether checkpoint.initial_load_path names a checkpoint's step folder (any folder that is not a
// Hugging Face one): its tensors are "model.<param>", "optimizer.…".
bool InitialLoadIsCheckpoint(const CheckpointSection& c) {
  std::error_code ec;
  return !c.initial_load_in_hf && std::filesystem::is_directory(c.initial_load_path, ec);
}

// checkpoint.initial_load_path's weights into the parallelized model, each rank taking the elements
// it holds: from a Hugging Face folder or a checkpoint's step folder only those bytes are read; a
// torch.save file is read whole. initial_load_model_only = false leaves it to
// ResumeFromCheckpoint, which loads the whole state.
absl::Status LoadInitialWeights(Trainer::State& s) {
  const CheckpointSection& c = s.config.checkpoint;
  if (c.initial_load_path.empty()) return absl::OkStatus();
  const bool checkpoint = InitialLoadIsCheckpoint(c);
  if (!c.initial_load_model_only) {
    if (checkpoint) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint.initial_load_model_only = false: checkpoint.initial_load_path = \"",
        c.initial_load_path,
        "\" is not a checkpoint's step folder, so it holds no optimizer state or data position; "
        "name a step-N folder, or set initial_load_model_only = true"));
  }
  std::unique_ptr<StateReader> reader;
  std::optional<StoredCheckpoint> step;
  if (c.initial_load_in_hf) {
    RT_ASSIGN_OR_RETURN(reader, OpenHfStateReader(c.initial_load_path, s.model->args()));
  } else if (checkpoint) {
    RT_ASSIGN_OR_RETURN(step, OpenCheckpointStep(c.initial_load_path));
  } else {
    RT_ASSIGN_OR_RETURN(reader, OpenTorchSaveReader(c.initial_load_path));
  }
  if (step) reader = std::move(step->state);
  const ScopedCpuTensorPeak memory;
  const auto start = std::chrono::steady_clock::now();
  RT_RETURN_IF_ERROR(Guarded(s, "loading initial weights", [&] {
    return s.gradients->LoadParameters(*reader, checkpoint ? "model." : "");
  }));
  RT_LOG(Info) << absl::StrFormat(
      "rank %d loaded its part of the %s weights %s in %.3f s: %d bytes read, CPU tensor memory "
      "+%d bytes",
      s.rank.rank, c.initial_load_in_hf ? "Hugging Face" : "initial", c.initial_load_path,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      reader->bytes_read(), memory.extra_bytes());
  return absl::OkStatus();
}

// A name for this run's checkpoint saves, the same on every rank (rank 0's pid and start time):
// the temporary folder of a save in progress, told apart from a killed run's leftovers.
absl::Status AgreeOnSaveTag(Trainer::State& s) {
  const double pid = double(getpid());
  const double ms = double(std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count());
  std::vector<std::vector<double>> all = {{pid, ms}};
  if (s.comm) {
    RT_RETURN_IF_ERROR(Guarded(s, "agreeing on a checkpoint tag", [&]() -> absl::Status {
      all = s.comm->AllGatherDoubles({pid, ms});
      return absl::OkStatus();
    }));
  }
  s.tag_pid = all[0][0];
  s.tag_ms = all[0][1];
  return absl::OkStatus();
}

// The newest usable checkpoint when training resumes (nullopt: none), loaded into the
// parallelized model and optimizer — each rank reading only the elements it holds — with the step,
// data position and RNG state. Also readies the checkpoint writer.
absl::StatusOr<bool> ResumeFromCheckpoint(Trainer::State& s) {
  const CheckpointSection& c = s.config.checkpoint;
  // A replacement takes its state from memory and the save tag with it (heal.h).
  if (s.config.job.mode == JobMode::kEval || s.rank.heal_generation > 0) return false;
  std::optional<StoredCheckpoint> resume;
  if (c.enable) {
    RT_RETURN_IF_ERROR(AgreeOnSaveTag(s));
    trainer_internal::OpenCheckpointWriter(s);
    // A damaged newest checkpoint (a crash mid-copy, a truncated file) is skipped for the one
    // before.
    std::vector<std::string> skipped;
    RT_ASSIGN_OR_RETURN(resume, s.checkpoints->OpenNewestUsable(&skipped));
    for (const std::string& line : skipped) RT_LOG(Warning) << line;
    std::optional<int64_t> step;
    if (resume) step = resume->train_state.step;
    if (s.comm) RT_RETURN_IF_ERROR(CheckSameCheckpoint(s, step));
  }
  // No checkpoint of its own yet: the whole state of another step folder (torchtitan's
  // initial_load_model_only = false), e.g. the job named by `ringctl submit --resume-from`.
  if (!resume && !c.initial_load_model_only) {
    RT_ASSIGN_OR_RETURN(resume, OpenCheckpointStep(c.initial_load_path));
  }
  if (!resume) return false;
  const ScopedCpuTensorPeak memory;
  const auto start = std::chrono::steady_clock::now();
  RT_RETURN_IF_ERROR(Guarded(s, "loading checkpoint", [&]() -> absl::Status {
    RT_RETURN_IF_ERROR(s.gradients->LoadParameters(*resume->state, "model."));
    return s.gradients->LoadOptimizer(*resume->state, resume->train_state.optimizer_step);
  }));
  RT_LOG(Info) << absl::StrFormat(
      "rank %d loaded its part of %s in %.3f s: %d bytes read, CPU tensor memory +%d bytes",
      s.rank.rank, resume->path,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      resume->state->bytes_read(), memory.extra_bytes());
  s.train_state = resume->train_state;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(resume->train_state.rng_state);
  RT_LOG(Info) << "resumed from " << resume->path << " (step " << s.train_state.step << ")";
  return true;
}

// The attention plan, precision and activation checkpointing applied to the model, the data
// sharding and the gradient path (worker/engine/parallel/parallelize.h).
absl::Status ParallelizeModel(Trainer::State& s) {
  std::optional<int64_t> eos;
  if (s.config.model.attn_mask_type == AttnMaskType::kBlockCausal) {
    const int64_t id =
        s.config.training.eos_id >= 0 ? s.config.training.eos_id : s.dataset->eos_id();
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.attn_mask_type = \"block_causal\" needs the token that ends a document, and "
          "training.eos_id is -1 while the data has none (",
          s.dataset->Describe(),
          "; a tokenizer without an end-of-text token, or data without a tokenizer): set "
          "training.eos_id"));
    }
    eos = id;
    RT_LOG(Info) << "attention: block-causal over packed documents, each ending with token " << id;
  }
  return Guarded(s, "parallelizing the model", [&]() -> absl::Status {
    Parallelized p = Parallelize(s.config, s.mesh, s.comm.get(), s.device, *s.model, eos);
    s.attention = std::move(p.attention);
    s.data.emplace(p.data);
    s.gradients = std::move(p.gradients);
    return absl::OkStatus();
  });
}

void MakeSchedule(Trainer::State& s) {
  const JobConfig& config = s.config;
  // Phases longer than the run are clamped (by LrSchedule too); say so where the user looks.
  const LrPhases phases = ResolveLrPhases(config);
  for (const std::string& warning : phases.warnings) RT_LOG(Warning) << warning;
  s.schedule.emplace(
      LrScheduleOptions{config.optimizer.lr, config.training.steps,
                        config.lr_scheduler.warmup_steps, config.lr_scheduler.decay_ratio,
                        config.lr_scheduler.decay_type, config.lr_scheduler.min_lr_factor});
}

// Rank 0 writes the step records (and, with metrics.enable_tensorboard, the event file; a resumed
// run starts a new one in the same folder). With $RINGTRAIN_JSONL_EVERY_RANK=1 (the agent sets it,
// and gives each rank its own path) every rank writes them, so each rank's agent can export its own
// rank's figures; the records are the same on every rank. A resumed run continues the file.
absl::Status OpenReport(Trainer::State& s, bool resumed) {
  const char* every_rank = std::getenv("RINGTRAIN_JSONL_EVERY_RANK");
  s.every_rank_writes_jsonl = every_rank != nullptr && std::string(every_rank) == "1";
  const MetricsSection& m = s.config.metrics;
  if (m.enable_tensorboard && s.rank.rank == 0) {
    RT_ASSIGN_OR_RETURN(s.tensorboard, EventFileWriter::Open(m.save_tb_folder));
    RT_LOG(Info) << "TensorBoard: " << s.tensorboard->path()
                 << " (tensorboard --logdir on this folder or one above it)";
  }
  if (m.jsonl.empty() || (s.rank.rank != 0 && !s.every_rank_writes_jsonl)) {
    return absl::OkStatus();
  }
  return s.jsonl.Open(m.jsonl, /*append=*/resumed);
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
  s->generation = rank.heal_generation;
  if (const char* control = std::getenv("RINGTRAIN_CONTROL_FILE")) s->control_file = control;
  s->mesh = Mesh{rank.rank,     rank.world_size, degrees.dp(),   degrees.cp,
                 degrees.shard, degrees.sharded, degrees.ulysses};
  const bool eval = config.job.mode == JobMode::kEval;
  RT_RETURN_IF_ERROR(ChooseDevice(*s));
  RT_RETURN_IF_ERROR(JoinWorld(*s));
  s->mfu = ChooseMfuBasis(s->config, s->device, rank.world_size);  // every rank, just after joining
  if (s->mfu && rank.rank == 0) {
    RT_LOG(Info) << "MFU: " << s->mfu->Describe();
  }
  RT_RETURN_IF_ERROR(OpenData(*s, eval ? 1 : degrees.accumulation));
  RT_RETURN_IF_ERROR(BuildModel(*s));
  RT_RETURN_IF_ERROR(ParallelizeModel(*s));
  const progress::ScopedPhase loading(progress::Phase::kIo);  // weights and checkpoints
  RT_RETURN_IF_ERROR(LoadInitialWeights(*s));
  RT_ASSIGN_OR_RETURN(const bool resumed, ResumeFromCheckpoint(*s));
  if (!eval) RT_RETURN_IF_ERROR(trainer_internal::StartSnapshots(*s));
  MakeSchedule(*s);
  RT_RETURN_IF_ERROR(OpenReport(*s, resumed || rank.heal_generation > 0));
  const MetricsSection& metrics = s->config.metrics;
  if (metrics.straggler_window > 0 && s->comm) {
    s->stragglers.emplace(metrics.straggler_window, metrics.straggler_threshold);
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(s)));
}

absl::Status Trainer::Run() {
  return state_->config.job.mode == JobMode::kEval ? Evaluate() : Train();
}

}  // namespace ringtrain
