#include "worker/trainer/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "worker/engine/checkpoint/checkpoint.h"
#include "worker/engine/data/dataset.h"
#include "worker/engine/data/sampler.h"
#include "worker/engine/model/llama.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/optim/clip.h"
#include "worker/engine/optim/lr_schedule.h"
#include "worker/engine/parallel/comm.h"
#include "worker/engine/parallel/cp_shard.h"
#include "worker/engine/parallel/grad_sync.h"
#include "worker/engine/parallel/mesh.h"
#include "worker/engine/parallel/ring_attention.h"
#include "worker/trainer/step_report.h"

namespace ringtrain {

using Clock = std::chrono::steady_clock;

struct Trainer::State {
  JobConfig config;
  RankInfo rank;
  Mesh mesh;
  c10::Device device = c10::Device(c10::kCPU);  // the one place the device is chosen
  std::unique_ptr<Communicator> comm;  // null when world = 1
  std::shared_ptr<AttentionKernel> attention;
  std::unique_ptr<TokenDataset> dataset;
  std::optional<WindowSampler> sampler;
  Transformer model{nullptr};
  std::vector<at::Tensor> params;
  std::unique_ptr<AdamW> optimizer;
  std::optional<LrSchedule> schedule;
  std::optional<CheckpointFolder> checkpoints;
  JsonlWriter jsonl;
  bool every_rank_writes_jsonl = false;
  TrainState train_state;
};

namespace {

DatasetSpec TrainingDataSpec(const JobConfig& c, int64_t dp) {
  DatasetSpec spec;
  spec.kind = c.training.dataset;
  spec.path = c.training.dataset_path;
  spec.token_dtype = c.training.token_dtype;
  spec.vocab_size = c.model.vocab_size;
  spec.seed = static_cast<uint64_t>(c.training.seed);
  spec.min_tokens = c.training.steps * dp * c.training.local_batch_size * c.training.seq_len + 1;
  return spec;
}

DatasetSpec ValidationDataSpec(const JobConfig& c, int64_t dp) {
  DatasetSpec spec = TrainingDataSpec(c, dp);
  if (!c.validation.dataset.empty()) spec.kind = c.validation.dataset;
  if (!c.validation.dataset_path.empty()) spec.path = c.validation.dataset_path;
  // Synthetic validation data: held-out walks on the training source.
  spec.sample_stream = 1;
  spec.min_tokens = c.validation.steps * dp * c.validation.local_batch_size * c.training.seq_len + 1;
  return spec;
}

at::Tensor ToTensor(const std::vector<int64_t>& values, int64_t batch, int64_t length) {
  return torch::tensor(values, torch::kInt64).view({batch, length});
}

// Sum of token cross-entropies: logits (B, L, V), labels (B, L).
at::Tensor LossSum(const at::Tensor& logits, const at::Tensor& labels) {
  return torch::nn::functional::cross_entropy(
      logits.flatten(0, 1), labels.flatten(),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

// Catches LibTorch's and c10d's exceptions at the step boundary and turns them into a Status. A
// failure with peers adds which rank was lost, so the message names the peer, not just a socket.
template <typename F>
absl::Status Guarded(Trainer::State& s, const std::string& what, F&& f) {
  std::string error;
  try {
    return f();
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (s.comm) {
    return absl::UnavailableError(absl::StrCat(what, " failed on ", s.mesh.Describe(), ": ",
                                               error, "; ", s.comm->DiagnoseFailure()));
  }
  return absl::InternalError(absl::StrCat(what, " failed: ", error));
}

// cp_shard, the one place a batch is split: inputs, labels and positions together.
ShardedBatch ShardBatch(const Trainer::State& s, const TokenBatch& batch) {
  const at::Tensor inputs = ToTensor(batch.inputs, batch.batch, batch.seq_len);
  const at::Tensor labels = ToTensor(batch.labels, batch.batch, batch.seq_len);
  ShardedBatch shard = CpShard(inputs, labels, s.mesh.cp, s.mesh.cp_rank(),
                               s.config.parallelism.context_parallel_load_balancer);
  shard.inputs = shard.inputs.to(s.device);
  shard.labels = shard.labels.to(s.device);
  return shard;
}

// Per-rank figures of the last step, gathered to every rank (one row per rank), in the order of
// kRankFigureNames.
constexpr const char* kRankFigureNames[] = {
    "attention_seconds", "attention_cpu_seconds", "comm_wait_seconds", "bytes_sent",
    "peak_memory_bytes", "ring_wait_seconds"};

std::vector<std::vector<double>> GatherRankFigures(Trainer::State& s) {
  const AttentionStats& a = s.attention->stats();
  const CommStats c = s.comm ? s.comm->stats() : CommStats{};
  const std::vector<double> mine = {
      a.compute_seconds,   a.compute_cpu_seconds,     c.wait_seconds,
      double(c.bytes_sent), double(PeakMemoryBytes()), c.ring_wait_seconds};
  if (!s.comm) return {mine};
  return s.comm->AllGatherDoubles(mine);
}

std::string RankFiguresJson(const std::vector<std::vector<double>>& ranks) {
  std::vector<std::string> records;
  for (size_t r = 0; r < ranks.size(); ++r) {
    JsonRecord record;
    record.Add("rank", int64_t(r));
    for (size_t f = 0; f < ranks[r].size(); ++f) {
      const std::string name = kRankFigureNames[f];
      const bool integral = name == "bytes_sent" || name == "peak_memory_bytes";
      if (integral) {
        record.Add(name, int64_t(ranks[r][f]));
      } else {
        record.Add(name, ranks[r][f]);
      }
    }
    records.push_back(record.str());
  }
  return absl::StrCat("[", absl::StrJoin(records, ", "), "]");
}

}  // namespace

Trainer::Trainer(std::unique_ptr<State> state) : state_(std::move(state)) {}
Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const JobConfig& config, RankInfo rank) {
  auto s = std::make_unique<State>();
  s->config = config;
  s->rank = rank;
  const bool eval = config.job.mode == "eval";
  const int64_t dp = DataParallelDegree(config, rank.world_size);
  s->mesh = Mesh{rank.rank, rank.world_size, dp, config.parallelism.context_parallel_degree};
  try {
    s->device = c10::Device(rank.device);
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", rank.device, "' is not a device (valid: cpu, cuda:N)"));
  }
  RT_RETURN_IF_ERROR(Communicator::CheckDeviceSupported(s->device));
  if (rank.world_size > 1) {
    RendezvousOptions rendezvous{
        rank.master_addr, rank.master_port,
        std::chrono::milliseconds(int64_t(config.comm.timeout_seconds * 1000)), s->device};
    RT_ASSIGN_OR_RETURN(s->comm, Communicator::Create(s->mesh, rendezvous));
    RT_LOG(Info) << "joined " << s->mesh.Describe() << " via " << rank.master_addr << ":"
                 << rank.master_port;
  }
  RT_ASSIGN_OR_RETURN(s->dataset, OpenDataset(eval ? ValidationDataSpec(config, dp)
                                                   : TrainingDataSpec(config, dp)));
  RT_LOG(Info) << "data: " << s->dataset->Describe();
  if (s->dataset->entropy_rate_nats() >= 0) {
    RT_LOG(Info) << absl::StrFormat(
        "entropy floor of the synthetic source: %.4f nats/token (the best loss any model can reach)",
        s->dataset->entropy_rate_nats());
  }
  SamplerSpec sampler_spec;
  sampler_spec.kind = eval ? "sequential" : config.training.sampler;
  sampler_spec.seq_len = config.training.seq_len;
  sampler_spec.local_batch_size =
      eval ? config.validation.local_batch_size : config.training.local_batch_size;
  sampler_spec.dp_degree = dp;
  sampler_spec.seed = static_cast<uint64_t>(config.training.seed);
  RT_ASSIGN_OR_RETURN(WindowSampler sampler, WindowSampler::Create(s->dataset.get(), sampler_spec));
  s->sampler.emplace(std::move(sampler));

  RT_RETURN_IF_ERROR(Guarded(*s, "building the model", [&]() -> absl::Status {
    torch::manual_seed(static_cast<uint64_t>(config.training.seed));
    s->model = Transformer(ModelArgs::FromConfig(config.model));
    s->model->init_weights();
    // The attention plan, chosen once: local tiled attention, or ring attention across the CP group.
    if (s->mesh.cp > 1) {
      s->attention = std::make_shared<RingAttentionKernel>(
          s->comm.get(), config.training.seq_len, config.parallelism.context_parallel_load_balancer,
          config.parallelism.context_parallel_rotate_method);
    } else {
      s->attention = std::make_shared<LocalAttentionKernel>();
    }
    s->model->SetAttentionKernel(s->attention);
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
  if (!config.checkpoint.initial_load_path.empty()) {
    RT_ASSIGN_OR_RETURN(StateDict weights, ReadStateDict(config.checkpoint.initial_load_path));
    RT_RETURN_IF_ERROR(
        LoadModelWeights(*s->model, weights, config.checkpoint.initial_load_path));
    RT_LOG(Info) << "loaded initial weights from " << config.checkpoint.initial_load_path;
  }

  AdamWOptions adam{config.optimizer.lr, config.optimizer.beta1, config.optimizer.beta2,
                    config.optimizer.eps, config.optimizer.weight_decay};
  std::vector<std::pair<std::string, at::Tensor>> named_params;
  for (const auto& item : s->model->named_parameters()) {
    named_params.emplace_back(item.key(), item.value());  // not detached: Step reads .grad()
  }
  s->optimizer = std::make_unique<AdamW>(std::move(named_params), adam);
  s->schedule.emplace(LrScheduleOptions{config.optimizer.lr, config.training.steps,
                                        config.lr_scheduler.warmup_steps,
                                        config.lr_scheduler.decay_ratio,
                                        config.lr_scheduler.decay_type,
                                        config.lr_scheduler.min_lr_factor});

  bool resumed = false;
  if (config.checkpoint.enable && !eval) {
    s->checkpoints.emplace(config.checkpoint.folder, config.checkpoint.keep_latest_k);
    RT_ASSIGN_OR_RETURN(std::optional<int64_t> latest, s->checkpoints->LatestStep());
    if (latest) {
      RT_ASSIGN_OR_RETURN(Checkpoint ckpt, s->checkpoints->Load(*latest));
      RT_RETURN_IF_ERROR(
          LoadModelWeights(*s->model, ckpt.model, s->checkpoints->StepPath(*latest)));
      RT_RETURN_IF_ERROR(s->optimizer->LoadStateDict(ckpt.optimizer));
      s->train_state = ckpt.train_state;
      at::Generator generator = at::detail::getDefaultCPUGenerator();
      generator.set_state(ckpt.train_state.rng_state);
      resumed = true;
      RT_LOG(Info) << "resumed from " << s->checkpoints->StepPath(*latest) << " (step "
                   << s->train_state.step << ")";
    }
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
  return state_->config.job.mode == "eval" ? Evaluate() : Train();
}

absl::Status Trainer::Train() {
  State& s = *state_;
  const JobConfig& c = s.config;
  const int64_t global_tokens = s.sampler->global_batch() * c.training.seq_len;
  const auto run_start = Clock::now();
  if (s.train_state.step >= c.training.steps) {
    RT_LOG(Info) << "nothing to do: the checkpoint is at step " << s.train_state.step << " of "
                 << c.training.steps;
    return absl::OkStatus();
  }
  for (int64_t step = s.train_state.step + 1; step <= c.training.steps; ++step) {
    const auto step_start = Clock::now();
    StepReport report;
    report.step = step;
    report.total_steps = c.training.steps;
    report.lr = s.schedule->LrAt(step);
    report.tokens = global_tokens;
    s.attention->stats().Reset();
    if (s.comm) s.comm->stats().Reset();
    RT_RETURN_IF_ERROR(Guarded(s, absl::StrCat("step ", step), [&]() -> absl::Status {
      const TokenBatch batch = s.sampler->BatchForStep(step - 1, s.mesh.dp_rank());
      const ShardedBatch shard = ShardBatch(s, batch);
      const at::Tensor logits = s.model->forward(shard.inputs, shard.positions);
      // Divided by the GLOBAL token count: summing over ranks gives the global token-mean.
      const at::Tensor loss = LossSum(logits, shard.labels) / double(global_tokens);
      s.model->zero_grad();
      loss.backward();
      report.loss = loss.item<double>();
      if (s.comm) {
        report.loss = AllReduceSum(*s.comm, report.loss);
        AllReduceGradients(*s.comm, s.params);
      }
      report.grad_norm = ClipGradNorm(s.params, c.training.max_norm);
      // Every rank holds the same global loss and norm, so all stop together.
      if (!std::isfinite(report.loss) || !std::isfinite(report.grad_norm)) {
        return absl::AbortedError(absl::StrFormat(
            "step %d: loss is %f and gradient norm %f; stopping before the optimizer step (the "
            "weights are those after step %d). HINT: lower optimizer.lr or training.max_norm",
            step, report.loss, report.grad_norm, step - 1));
      }
      s.optimizer->Step(report.lr);
      return absl::OkStatus();
    }));
    s.train_state.step = step;
    s.train_state.global_sample = step * s.sampler->global_batch();

    report.step_seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
    report.elapsed_seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
    report.tokens_per_second = double(global_tokens) / report.step_seconds;
    report.peak_memory_bytes = PeakMemoryBytes();
    std::vector<std::vector<double>> ranks;
    RT_RETURN_IF_ERROR(Guarded(s, "gathering per-rank figures", [&]() -> absl::Status {
      ranks = GatherRankFigures(s);
      return absl::OkStatus();
    }));
    if (s.rank.rank == 0 || s.every_rank_writes_jsonl) {
      RT_RETURN_IF_ERROR(s.jsonl.Write(StepReportJson(report, RankFiguresJson(ranks))));
    }
    if (s.rank.rank == 0 &&
        (step % c.metrics.log_freq == 0 || step == c.training.steps || step == 1)) {
      RT_LOG(Info) << StepReportLine(report);
    }
    const bool save = s.checkpoints &&
                      (step % c.checkpoint.interval == 0 || step == c.training.steps);
    if (save && s.rank.rank == 0) {
      // Parameters and optimizer state are replicated: rank 0 writes the one copy.
      Checkpoint ckpt{ModelStateDict(*s.model), s.optimizer->StateDict(), s.train_state};
      ckpt.train_state.rng_state = at::detail::getDefaultCPUGenerator().get_state();
      RT_RETURN_IF_ERROR(s.checkpoints->Save(ckpt, JobConfigToToml(c)));
      RT_LOG(Info) << "saved checkpoint " << s.checkpoints->StepPath(step);
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::Evaluate() {
  State& s = *state_;
  const JobConfig& c = s.config;
  double loss_sum = 0;
  int64_t tokens = 0;
  RT_RETURN_IF_ERROR(Guarded(s, "evaluation", [&]() -> absl::Status {
    torch::NoGradGuard no_grad;
    for (int64_t step = 0; step < c.validation.steps; ++step) {
      const TokenBatch batch = s.sampler->BatchForStep(step, s.mesh.dp_rank());
      const ShardedBatch shard = ShardBatch(s, batch);
      loss_sum += LossSum(s.model->forward(shard.inputs, shard.positions), shard.labels)
                      .item<double>();
      tokens += s.sampler->global_batch() * c.training.seq_len;
    }
    if (s.comm) loss_sum = AllReduceSum(*s.comm, loss_sum);
    return absl::OkStatus();
  }));
  const double mean = loss_sum / double(tokens);
  if (s.rank.rank == 0) {
    RT_LOG(Info) << absl::StrFormat("validation loss %.6f over %d tokens (%d batches)", mean,
                                    tokens, c.validation.steps);
  }
  return s.jsonl.Write(JsonRecord().Add("validation_loss", mean).Add("tokens", tokens).str());
}

}  // namespace ringtrain
