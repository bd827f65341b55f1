// The step record: the contract between the trainer (writes one per step, rank 0, as a JSONL
// line), the agent (relays it, reads figures for /metrics, answers StepRecordsRequests from the
// file), the coordinator (stores it, streams it) and ringctl (top, export, loss-compare, watch).
// Written once here, read back here: every side uses StepRecord, so the compiler finds every
// reader when a field changes. A new per-step or per-rank figure is one member and one row of
// its field table (kStepFields / kRankFields); the JSON, the all-gather of rank figures and every
// reader follow.
//
// On the wire (one line, keys in table order, floats "%.17g" so they round-trip exactly, a
// non-finite value as null):
//   {"step": 3, "loss": 5.25, "grad_norm": 0.75, …, "ranks": [{"rank": 0, "attention_seconds": …}]}
#ifndef RINGTRAIN_COMMON_RECORD_STEP_RECORD_H_
#define RINGTRAIN_COMMON_RECORD_STEP_RECORD_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringtrain {

// One rank's figures of a step; every rank's are gathered to every rank after the step.
// Counts (bytes) are held as doubles (exact below 2^53) so the whole struct all-gathers as one
// vector; they are written as JSON integers.
struct RankFigures {
  int64_t rank = 0;                  // written from the position in `ranks`, not gathered
  double attention_seconds = 0;      // wall time in attention block compute
  double attention_cpu_seconds = 0;  // this thread's CPU time in the same
  double comm_wait_seconds = 0;      // blocked on transfers/collectives
  double bytes_sent = 0;
  double peak_memory_bytes = 0;         // resident peak of the process
  double ring_wait_seconds = 0;         // the part of ring transfers compute did not hide
  double device_memory_peak_bytes = 0;  // CUDA caching allocator's peak in the step; 0 on the CPU
  double attention_pairs = 0;  // query-key pairs its queries see in the step (its attention work)
  double ring_bytes_sent = 0;  // ring attention's K/V and dK/dV bytes (part of bytes_sent)
  double compute_seconds = 0;  // its own step wall time less comm_wait_seconds
  // checkpoint.memory_interval: the newest step of the in-memory snapshot it holds for its source
  // rank (worker/trainer/memory_snapshots.h); 0 when none.
  double snapshot_held_step = 0;
  // Its ring's K/V and dK/dV transfer time that compute did not hide, without the waits for a
  // slower peer (kv_exchange.h's ExposedRingTransfer); the same on every rank of a ring, 0 without
  // one.
  double ring_transfer_exposed_seconds = 0;
};

// The step's global figures (every rank holds the same), and every rank's own.
struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  double tokens_per_second = 0;
  double step_seconds = 0;
  double tokens = 0;                    // global tokens in this step
  double peak_memory_bytes = 0;         // rank 0's resident peak
  double device_memory_peak_bytes = 0;  // rank 0's CUDA caching allocator peak; 0 on the CPU
  double elapsed_seconds = 0;
  // Rank 0's checkpoint figures: the training stall of a save made after this step, and the write
  // time of a save whose (background) write finished by the end of this step; 0 when none.
  double checkpoint_stall_seconds = 0;
  double checkpoint_write_seconds = 0;
  // max / mean attention work (visible query-key pairs) per rank of a CP group, the worst group:
  // how well the load balancer spread the step's work. 1 for cp = 1.
  double attention_imbalance = 0;
  // The rank named a straggler after this step (worker/trainer/straggler.h): consistently slower
  // at computing than the median of the others, by straggler_ratio (> 1). Ratio 0: none named
  // (the rank is then -1; a record without these fields reads 0 for both).
  double straggler_rank = -1;
  double straggler_ratio = 0;
  // checkpoint.memory_interval: the newest step every rank's state is in memory on itself and on
  // its buddy, so a lost rank can be healed in place from it; 0 when none (or snapshots are off).
  double snapshot_step = 0;
  // Rank r's snapshot copies are on rank (r + snapshot_buddy_offset) % world (SnapshotOffset in
  // heal_instruction.h); 0 when snapshots are off.
  double snapshot_buddy_offset = 0;
  // The world's heal generation that computed the step: 0, or n after the n-th heal in place.
  double generation = 0;
  // Rank 0's checkpoint saves: the step a save began after (this step; 0 when none began), and
  // the newest step whose save rank 0 committed (COMPLETE written) by the end of this step (0 when
  // none did). The coordinator lists a job's checkpoints from them (`ringctl checkpoints`).
  double checkpoint_save_step = 0;
  double checkpoint_commit_step = 0;
  // [validation] enable: the mean loss over validation.steps batches of the validation data after
  // this step's update (every validation.freq steps and after the last); an eval job's one record
  // (step 1) holds its result here. Written after the other figures, only when set.
  std::optional<double> validation_loss;
  // Model FLOPs utilization, in percent (README "Metrics"): torchtitan's FLOPs per token times
  // tokens_per_second, over the world's peak FLOP/s (worker/trainer/mfu.h). Written after
  // validation_loss, only when the trainer knows a peak (a known GPU, the CPU's measured GEMM rate
  // or metrics.peak_flops).
  std::optional<double> mfu_percent;
  std::vector<RankFigures> ranks;  // in rank order; empty for a one-rank job

  std::string ToJson() const;  // one line, without the newline
};

// How a figure is written: a real with 17 digits, or an integer count.
enum class FigureKind { kReal, kCount };

template <class T>
struct FigureField {
  const char* name;
  double T::*member;
  FigureKind kind;
};

// The record's figures after "step", in wire order.
inline constexpr std::array<FigureField<StepRecord>, 19> kStepFields = {{
    {"loss", &StepRecord::loss, FigureKind::kReal},
    {"grad_norm", &StepRecord::grad_norm, FigureKind::kReal},
    {"lr", &StepRecord::lr, FigureKind::kReal},
    {"tokens_per_second", &StepRecord::tokens_per_second, FigureKind::kReal},
    {"step_seconds", &StepRecord::step_seconds, FigureKind::kReal},
    {"tokens", &StepRecord::tokens, FigureKind::kCount},
    {"peak_memory_bytes", &StepRecord::peak_memory_bytes, FigureKind::kCount},
    {"device_memory_peak_bytes", &StepRecord::device_memory_peak_bytes, FigureKind::kCount},
    {"elapsed_seconds", &StepRecord::elapsed_seconds, FigureKind::kReal},
    {"checkpoint_stall_seconds", &StepRecord::checkpoint_stall_seconds, FigureKind::kReal},
    {"checkpoint_write_seconds", &StepRecord::checkpoint_write_seconds, FigureKind::kReal},
    {"attention_imbalance", &StepRecord::attention_imbalance, FigureKind::kReal},
    {"straggler_rank", &StepRecord::straggler_rank, FigureKind::kCount},
    {"straggler_ratio", &StepRecord::straggler_ratio, FigureKind::kReal},
    {"snapshot_step", &StepRecord::snapshot_step, FigureKind::kCount},
    {"snapshot_buddy_offset", &StepRecord::snapshot_buddy_offset, FigureKind::kCount},
    {"generation", &StepRecord::generation, FigureKind::kCount},
    {"checkpoint_save_step", &StepRecord::checkpoint_save_step, FigureKind::kCount},
    {"checkpoint_commit_step", &StepRecord::checkpoint_commit_step, FigureKind::kCount},
}};

// The figures written only when set, after the others, in wire order.
inline constexpr std::array<std::pair<const char*, std::optional<double> StepRecord::*>, 2>
    kOptionalStepFields = {{{"validation_loss", &StepRecord::validation_loss},
                            {"mfu_percent", &StepRecord::mfu_percent}}};

// A rank's figures after "rank", in wire order (also the order of the all-gathered vector).
inline constexpr std::array<FigureField<RankFigures>, 12> kRankFields = {{
    {"attention_seconds", &RankFigures::attention_seconds, FigureKind::kReal},
    {"attention_cpu_seconds", &RankFigures::attention_cpu_seconds, FigureKind::kReal},
    {"comm_wait_seconds", &RankFigures::comm_wait_seconds, FigureKind::kReal},
    {"bytes_sent", &RankFigures::bytes_sent, FigureKind::kCount},
    {"peak_memory_bytes", &RankFigures::peak_memory_bytes, FigureKind::kCount},
    {"ring_wait_seconds", &RankFigures::ring_wait_seconds, FigureKind::kReal},
    {"device_memory_peak_bytes", &RankFigures::device_memory_peak_bytes, FigureKind::kCount},
    {"attention_pairs", &RankFigures::attention_pairs, FigureKind::kCount},
    {"ring_bytes_sent", &RankFigures::ring_bytes_sent, FigureKind::kCount},
    {"compute_seconds", &RankFigures::compute_seconds, FigureKind::kReal},
    {"snapshot_held_step", &RankFigures::snapshot_held_step, FigureKind::kCount},
    {"ring_transfer_exposed_seconds", &RankFigures::ring_transfer_exposed_seconds,
     FigureKind::kReal},
}};

// The figures in kRankFields order, for an all-gather of equal-length vectors, and back.
std::vector<double> RankFiguresToDoubles(const RankFigures& figures);
// INVALID_ARGUMENT when `values` does not hold kRankFields.size() numbers.
absl::StatusOr<RankFigures> RankFiguresFromDoubles(const std::vector<double>& values, int64_t rank);

// What a figure the record does not hold reads as: 0 (the coordinator's and ringctl's tables: an
// older or smaller record), or NaN (the agent's counters, which skip what is not finite). A JSON
// null (how a non-finite value is written) or a value that is not a number always reads NaN.
enum class MissingFigure { kZero, kNaN };

// One line of a JSONL file or one relayed record. nullopt for a JSON object without "step" (a
// record that is not a step report, e.g. an eval's validation loss). INVALID_ARGUMENT for text that
// is not a JSON object, a "step" that is not an integer, a "ranks" that is not an array of objects.
// A rank entry without an integer "rank" takes its position.
absl::StatusOr<std::optional<StepRecord>> ParseStepRecord(absl::string_view json,
                                                          MissingFigure missing);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_RECORD_STEP_RECORD_H_
