// The step loop (job.mode = train; the evaluation is validation.cc). One training step reads
// top to bottom as
//   zero grads → A × (next micro-batch → cp_shard → forward → loss → backward) → grad sync →
//   clip → finite check → optimizer step → maybe save → maybe validate → report
// with each stage a named function below; A = training.global_batch_size / (dp × B) micro-batches
// (gradient accumulation, 1 by default) add their gradients into the same .grad. Dimension
// letters: B local batch (one micro-batch), L sequence length, Lc = L / cp the local length,
// V vocabulary.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/safetensors/index.h"
#include "common/status_macros.h"
#include "common/tensorboard/step_scalars.h"
#include "worker/engine/parallel/document_balancer.h"
#include "worker/engine/parallel/grad_sync.h"
#include "worker/engine/parallel/kv_exchange.h"
#include "worker/trainer/heal.h"
#include "worker/trainer/tensor_memory.h"
#include "worker/trainer/trainer_state.h"
#include "worker/trainer/validation.h"
#ifdef RINGTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ringtrain {
namespace {

at::Tensor ToTensor(const std::vector<int64_t>& values, int64_t batch, int64_t length) {
  return torch::tensor(values, torch::kInt64).view({batch, length});
}

}  // namespace

ShardedBatch trainer_internal::ShardBatch(const Trainer::State& s, const TokenBatch& batch) {
  const at::Tensor inputs = ToTensor(batch.inputs, batch.batch, batch.seq_len);
  const at::Tensor labels = ToTensor(batch.labels, batch.batch, batch.seq_len);
  return s.data->Shard(inputs, labels);
}

absl::Status trainer_internal::WriteRecord(Trainer::State& s, const StepRecord& record) {
  if (s.rank.rank == 0 || s.every_rank_writes_jsonl)
    RT_RETURN_IF_ERROR(s.jsonl.Write(record.ToJson()));
  if (s.tensorboard) {
    RT_RETURN_IF_ERROR(
        s.tensorboard->WriteScalars(record.step, WallTimeNow(), StepScalars(record)));
  }
  return absl::OkStatus();
}

namespace {

using Clock = std::chrono::steady_clock;
using trainer_internal::Guarded;
using trainer_internal::ShardBatch;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The peak tensor bytes since the last reset: the CUDA caching allocator's peak allocated bytes on
// a CUDA rank, the counting CPU allocator's (worker/trainer/tensor_memory.h) on a CPU rank; and the
// reset at the start of each step, so each step reports its own peak.
int64_t DevicePeakBytes(const c10::Device& device) {
#ifdef RINGTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  return device.is_cpu() ? CpuTensorPeakBytes() : 0;
}

void ResetDevicePeak(const c10::Device& device) {
#ifdef RINGTRAIN_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
  if (device.is_cpu()) ResetCpuTensorPeak();
}

// This dp rank's micro-batch `micro_batch` of batch `batch_index` (both 0-based): (B, L) inputs and
// labels, on the host.
TokenBatch NextBatch(const Trainer::State& s, int64_t batch_index, int64_t micro_batch) {
  return s.sampler->BatchForStep(batch_index, s.mesh.dp_rank(), micro_batch);
}

// This rank's part of the global token-mean loss: divided by the GLOBAL token count of the whole
// step (every rank, every micro-batch), so that summing over the micro-batches and the ranks gives
// the mean over every token of the step.
at::Tensor ForwardLoss(Trainer::State& s, const ShardedBatch& shard, int64_t global_tokens) {
  return s.model->Loss(shard.inputs, shard.positions, shard.labels) / double(global_tokens);
}

// Adds this micro-batch's gradients into .grad (zeroed once, before the step's first).
void Backward(const at::Tensor& loss) { loss.backward(); }

// Sums the loss (this rank's sum over its micro-batches) and the gradients over the world
// (the gradient path: all-reduced, or with FSDP reduce-scattered by each backward and summed over
// the replicas); returns the global loss.
double SyncLossAndGradients(Trainer::State& s, double local_loss) {
  const double global_loss = s.comm ? AllReduceSum(*s.comm, local_loss) : local_loss;
  s.gradients->FinishBackward();
  return global_loss;
}

// Every rank holds the same global loss and norm, so all stop together, before the update.
absl::Status CheckFinite(int64_t step, const StepReport& report) {
  if (std::isfinite(report.loss) && std::isfinite(report.grad_norm)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "step %d: loss is %f and gradient norm %f; stopping before the optimizer step (the "
      "weights are those after step %d). HINT: lower optimizer.lr or training.max_norm",
      step, report.loss, report.grad_norm, step - 1));
}

// The step proper, from the micro-batches to the optimizer update; fills loss and grad_norm.
// report->tokens is the step's global token count (G × L), every micro-batch's divisor.
absl::Status RunStep(Trainer::State& s, int64_t step, StepReport* report) {
  s.gradients->ZeroGrad();
  // The micro-batches' losses, added on the device in float64: one host read per step.
  at::Tensor local_loss = torch::zeros({}, torch::dtype(torch::kFloat64).device(s.device));
  s.step_cp_work.clear();
  const int64_t micro_batches = s.sampler->micro_batches();
  const bool sync_once =
      s.config.parallelism.fsdp_gradient_sync == FsdpGradientSync::kStep && micro_batches > 1;
  for (int64_t m = 0; m < micro_batches; ++m) {
    // parallelism.fsdp_gradient_sync = "step": only the last micro-batch's backward reduces.
    if (sync_once) s.gradients->SetGradientSync(m + 1 == micro_batches);
    const ShardedBatch shard = ShardBatch(s, NextBatch(s, step - 1, m));
    s.step_cp_work.resize(shard.cp_work.size(), 0);
    for (size_t r = 0; r < shard.cp_work.size(); ++r) s.step_cp_work[r] += shard.cp_work[r];
    const at::Tensor loss = ForwardLoss(s, shard, report->tokens);
    Backward(loss);
    local_loss += loss.detach().to(torch::kFloat64);
  }
  report->loss = SyncLossAndGradients(s, local_loss.item<double>());
  report->grad_norm = s.gradients->ClipGradNorm(s.config.training.max_norm);
  RT_RETURN_IF_ERROR(CheckFinite(step, *report));
  // A snapshot due after this step is written by the update itself, in the same pass.
  s.gradients->Step(report->lr, trainer_internal::StageSnapshot(s, step));
  return absl::OkStatus();
}

// Every rank's figures of the step, gathered to every rank, in rank order.
absl::StatusOr<std::vector<RankFigures>> GatherRankFigures(Trainer::State& s,
                                                           const StepReport& report) {
  const AttentionStats& a = s.attention->stats();
  const CommStats c = s.comm ? s.comm->stats() : CommStats{};
  RankFigures mine;
  mine.rank = s.rank.rank;
  mine.attention_seconds = a.compute_seconds;
  mine.attention_cpu_seconds = a.compute_cpu_seconds;
  mine.comm_wait_seconds = c.wait_seconds;
  mine.compute_seconds = std::max(0.0, report.step_seconds - c.wait_seconds);
  if (s.snapshots) mine.snapshot_held_step = double(s.snapshots->newest_held_step());
  mine.bytes_sent = static_cast<double>(c.bytes_sent);
  mine.ring_bytes_sent = static_cast<double>(c.ring_bytes_sent);
  mine.peak_memory_bytes = static_cast<double>(PeakMemoryBytes());
  mine.ring_wait_seconds = c.ring_wait_seconds;
  if (s.comm) mine.ring_transfer_exposed_seconds = ExposedRingTransfer(*s.comm);
  mine.device_memory_peak_bytes = static_cast<double>(DevicePeakBytes(s.device));
  const int64_t cp_rank = s.mesh.cp_rank();
  if (cp_rank < int64_t(s.step_cp_work.size())) {
    // A Ulysses group shares its members' queries by heads: each member does the group's mean.
    const int64_t u = s.mesh.ulysses;
    const int64_t first = cp_rank - s.mesh.ulysses_rank();
    double work = 0;
    for (int64_t j = first; j < first + u; ++j) work += double(s.step_cp_work[size_t(j)]);
    mine.attention_pairs = work / double(u);
  }
  if (!s.comm) return std::vector<RankFigures>{mine};
  const std::vector<std::vector<double>> rows =
      s.comm->AllGatherDoubles(RankFiguresToDoubles(mine));
  std::vector<RankFigures> ranks;
  for (size_t r = 0; r < rows.size(); ++r) {
    RT_ASSIGN_OR_RETURN(RankFigures figures, RankFiguresFromDoubles(rows[r], int64_t(r)));
    ranks.push_back(figures);
  }
  return ranks;
}

// max / mean attention work per rank within each CP group (consecutive ranks), the worst group.
double WorstCpImbalance(const std::vector<RankFigures>& ranks, int64_t cp) {
  double worst = 1;
  for (size_t g = 0; g + size_t(cp) <= ranks.size(); g += size_t(cp)) {
    std::vector<int64_t> work;
    for (size_t r = g; r < g + size_t(cp); ++r) work.push_back(int64_t(ranks[r].attention_pairs));
    worst = std::max(worst, Imbalance(work));
  }
  return worst;
}

// metrics.straggler_*: which rank, if any, is named a straggler after this step (every rank gathers
// the same figures, so every rank decides the same); rank 0 logs when that changes.
void NameStraggler(Trainer::State& s, int64_t step, const std::vector<RankFigures>& ranks,
                   StepReport* report) {
  const std::optional<Straggler> named = s.stragglers->Observe(ranks);
  report->straggler_rank = named ? named->rank : -1;
  report->straggler_ratio = named ? named->ratio : 0;
  const int64_t before = s.straggler ? s.straggler->rank : -1;
  if (s.rank.rank == 0 && named && named->rank != before) {
    RT_LOG(Warning) << absl::StrFormat(
        "rank %d is a straggler: its compute took %.2fx the median of the other ranks' for %d "
        "steps in a row (step %d: %.4f s vs %.4f s); every collective waits for it",
        named->rank, named->ratio, s.config.metrics.straggler_window, step, named->seconds,
        named->peer_seconds);
  } else if (s.rank.rank == 0 && !named && before >= 0) {
    RT_LOG(Info) << "rank " << before << " is no longer a straggler (step " << step << ")";
  }
  s.straggler = named;
}

// The step's record (WriteRecord) and, every log_freq steps, its line. `ranks`: every rank's
// figures of the step (GatherRankFigures).
absl::Status Report(Trainer::State& s, StepReport report, const std::vector<RankFigures>& ranks) {
  report.attention_imbalance = WorstCpImbalance(ranks, s.mesh.cp);
  if (s.snapshots) {
    // Committed: every rank's state is on its buddy too. Every rank prunes by the same figures.
    double committed = ranks.front().snapshot_held_step;
    for (const RankFigures& r : ranks) committed = std::min(committed, r.snapshot_held_step);
    report.snapshot_step = int64_t(committed);
    report.snapshot_buddy_offset = s.snapshot_offset;
    s.snapshots->Prune(report.snapshot_step);
  }
  if (s.stragglers) NameStraggler(s, report.step, ranks, &report);
  RT_RETURN_IF_ERROR(trainer_internal::WriteRecord(s, ToStepRecord(report, ranks)));
  const int64_t step = report.step;
  if (s.rank.rank == 0 &&
      (step % s.config.metrics.log_freq == 0 || step == report.total_steps || step == 1)) {
    RT_LOG(Info) << StepReportLine(report);
  }
  return absl::OkStatus();
}

// checkpoint.last_save_in_hf: the final checkpoint's weights as a Hugging Face folder, step-N/hf/,
// read back from the checkpoint just committed (rank 0).
absl::Status ExportHf(Trainer::State& s, int64_t step) {
  const CheckpointSection& c = s.config.checkpoint;
  const std::string dir = s.checkpoints->StepPath(step) + "/hf";
  HfExportOptions options;
  options.model = s.config.model;
  options.dtype = c.export_dtype;
  RT_ASSIGN_OR_RETURN(options.max_shard_bytes, ParseShardSize(c.hf_max_shard_size));
  options.tokenizer_path = s.config.training.tokenizer_path;
  RT_RETURN_IF_ERROR(Guarded(s, "exporting the Hugging Face folder", [&]() -> absl::Status {
    RT_ASSIGN_OR_RETURN(const StoredCheckpoint ckpt, s.checkpoints->Open(step));
    RT_ASSIGN_OR_RETURN(const StateDict model,
                        ReadFullModel(*ckpt.state, "model.", ParameterShapes(s.model->args())));
    return WriteHfFolder(dir, ToHfStateDict(model, s.model->args()), options);
  }));
  RT_LOG(Info) << "saved the Hugging Face folder " << dir;
  return absl::OkStatus();
}

// Saves whose writes finished: their write time goes into this step's record, and a line to the
// log (rank 0). `wait` waits for a write still going.
absl::Status CollectSaves(Trainer::State& s, bool wait, StepReport* report) {
  if (!s.checkpoint_writer) return absl::OkStatus();
  absl::StatusOr<std::vector<SaveFigures>> done = s.checkpoint_writer->Finished(wait);
  if (!done.ok()) {
    return absl::Status(done.status().code(),
                        absl::StrCat("writing a checkpoint failed: ", done.status().message()));
  }
  for (const SaveFigures& f : *done) {
    if (report != nullptr) {
      report->checkpoint_write_seconds += f.write_seconds;
      // Rank 0's write ends with the commit: the step is complete now.
      report->checkpoint_commit_step = std::max(report->checkpoint_commit_step, f.step);
    }
    if (s.rank.rank == 0) {
      RT_LOG(Info) << absl::StrFormat(
          "saved checkpoint %s: training stalled %.3f s, writing took %.3f s (%.1f MB from this "
          "rank)",
          s.checkpoints->StepPath(f.step), f.stall_seconds, f.write_seconds, double(f.bytes) / 1e6);
    }
  }
  return absl::OkStatus();
}

// Every checkpoint.interval steps and after the last: every writing rank saves its part of the
// parameters and optimizer state (checkpoint_writer.h; in the background with async_mode), rank 0
// commits the step. The stall goes into the step's record.
absl::Status MaybeSave(Trainer::State& s, int64_t step, StepReport* report) {
  const CheckpointSection& c = s.config.checkpoint;
  const bool last = step == s.config.training.steps;
  const bool due = s.checkpoints && (step % c.interval == 0 || last);
  if (!due) return CollectSaves(s, /*wait=*/false, report);
  const progress::ScopedPhase saving(progress::Phase::kIo);
  TrainState state = s.train_state;
  state.optimizer_step = s.gradients->optimizer_step();
  state.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  const ScopedCpuTensorPeak memory;
  uint64_t bytes = 0;
  RT_RETURN_IF_ERROR(Guarded(s, absl::StrCat("saving checkpoint ", step), [&]() -> absl::Status {
    const std::vector<StatePiece> pieces = s.gradients->CheckpointPieces();
    for (const StatePiece& piece : pieces) bytes += uint64_t(piece.end - piece.begin) * 4;
    RT_ASSIGN_OR_RETURN(report->checkpoint_stall_seconds,
                        s.checkpoint_writer->Save(pieces, state, JobConfigToToml(s.config)));
    return absl::OkStatus();
  }));
  report->checkpoint_save_step = step;
  RT_LOG(Info) << absl::StrFormat(
      "rank %d saving its part of step %d: %d bytes, training stalled %.3f s, CPU tensor memory "
      "+%d bytes",
      s.rank.rank, step, bytes, report->checkpoint_stall_seconds, memory.extra_bytes());
  RT_RETURN_IF_ERROR(CollectSaves(s, /*wait=*/last, report));
  if (c.last_save_in_hf && last && s.rank.rank == 0) RT_RETURN_IF_ERROR(ExportHf(s, step));
  return absl::OkStatus();
}

// validation.enable: every validation.freq steps and after the last, the validation loss of the
// weights after this step's update (validation.h), into the step's record.
absl::Status MaybeValidate(Trainer::State& s, int64_t step, StepReport* report) {
  if (!trainer_internal::ValidationDue(s.config, step)) return absl::OkStatus();
  const auto start = Clock::now();
  RT_ASSIGN_OR_RETURN(const trainer_internal::ValidationLoss result,
                      trainer_internal::ComputeValidationLoss(s, *s.validation_sampler));
  report->validation_loss = result.mean;
  if (s.rank.rank == 0) {
    RT_LOG(Info) << absl::StrFormat(
        "step %d: validation loss %.6f over %d tokens (%d batches, %.3f s)", step, result.mean,
        result.tokens, s.config.validation.steps, SecondsSince(start));
  }
  return absl::OkStatus();
}

// One step, from its micro-batches to its record.
absl::Status TrainStep(Trainer::State& s, int64_t step, Clock::time_point run_start) {
  const int64_t total_steps = s.config.training.steps;
  const int64_t global_tokens = s.sampler->global_batch() * s.config.training.seq_len;
  const auto step_start = Clock::now();
  StepReport report;
  report.step = step;
  report.total_steps = total_steps;
  report.lr = s.schedule->LrAt(step);
  report.tokens = global_tokens;
  report.generation = s.generation;
  s.attention->stats().Reset();
  if (s.comm) s.comm->stats().Reset();
  ResetDevicePeak(s.device);

  RT_RETURN_IF_ERROR(
      Guarded(s, absl::StrCat("step ", step), [&] { return RunStep(s, step, &report); }));
  s.train_state.step = step;
  s.train_state.global_sample = step * s.sampler->global_batch();
  RT_RETURN_IF_ERROR(trainer_internal::MaybeSnapshot(s, step));
  progress::StepDone(step);

  report.step_seconds = SecondsSince(step_start);
  report.elapsed_seconds = SecondsSince(run_start);
  report.tokens_per_second = double(global_tokens) / report.step_seconds;
  if (s.mfu) report.mfu_percent = s.mfu->Percent(report.tokens_per_second);
  report.peak_memory_bytes = PeakMemoryBytes();
  report.device_memory_peak_bytes = DevicePeakBytes(s.device);
  RT_RETURN_IF_ERROR(MaybeSave(s, step, &report));
  // The step's figures before any validation, whose work is not the step's.
  std::vector<RankFigures> ranks;
  RT_RETURN_IF_ERROR(Guarded(s, "gathering per-rank figures", [&]() -> absl::Status {
    RT_ASSIGN_OR_RETURN(ranks, GatherRankFigures(s, report));
    return absl::OkStatus();
  }));
  RT_RETURN_IF_ERROR(MaybeValidate(s, step, &report));
  return Report(s, report, ranks);
}

}  // namespace

absl::Status Trainer::Train() {
  State& s = *state_;
  const int64_t total_steps = s.config.training.steps;
  const auto run_start = Clock::now();
  if (s.rank.heal_generation > 0) {
    RT_ASSIGN_OR_RETURN(s.train_state.step, trainer_internal::JoinAsReplacement(s));
  }
  if (s.train_state.step >= total_steps) {
    RT_LOG(Info) << "nothing to do: the checkpoint is at step " << s.train_state.step << " of "
                 << total_steps;
    return absl::OkStatus();
  }
  for (int64_t step = s.train_state.step + 1; step <= total_steps; ++step) {
    const absl::Status status = TrainStep(s, step, run_start);
    if (status.ok()) continue;
    // A lost peer with snapshots on: healed in place, on from the step rolled back to.
    RT_ASSIGN_OR_RETURN(const int64_t rolled_back_to, trainer_internal::HealInPlace(s, status));
    step = rolled_back_to;
  }
  return absl::OkStatus();
}

}  // namespace ringtrain
