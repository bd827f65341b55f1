// What `ringctl top` shows: one row per rank of a job's step, from the `ranks` array of the step's
// JSONL record (worker/trainer/step_report.h: each rank's figures of that step, all-gathered by
// the trainer), the CP imbalance of each context-parallel group, and the slowest rank. Pure: no
// I/O, no gRPC.
#ifndef RINGTRAIN_CLIENT_RANK_TABLE_H_
#define RINGTRAIN_CLIENT_RANK_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringtrain {

struct RankRow {
  int rank = 0;
  int cp_group = 0;  // rank / cp (cp innermost)
  // The record's own figures for the step (seconds, bytes).
  double attention_seconds = 0;      // attention compute, wall time
  double attention_cpu_seconds = 0;
  double comm_wait_seconds = 0;      // waiting in collectives
  double ring_wait_seconds = 0;      // ring transfer time not hidden by compute (exposed)
  double bytes_sent = 0;
  double peak_memory_bytes = 0;
  double device_memory_peak_bytes = 0;
  bool slowest = false;  // see RankTable::slowest_rank
};

struct CpGroupFigures {
  int cp_group = 0;
  std::vector<int> ranks;
  double max_attention_seconds = 0;
  double min_attention_seconds = 0;
  // max / min attention time in the group: 1.0 is perfect balance. 0 when min is 0 (undefined).
  double imbalance = 0;
};

struct RankTable {
  int64_t step = 0;
  double step_seconds = 0;
  std::vector<RankRow> rows;           // by rank
  std::vector<CpGroupFigures> groups;  // by cp_group
  // The rank with the most attention compute in the step: its CP group's ring waits for it (the
  // others show it as communication wait). -1 when there are no rows.
  int slowest_rank = -1;
};

// Reads a step record (one JSON object). INVALID_ARGUMENT when it is not one, has no integer
// `step` or no `ranks` array (a one-rank trainer writes none), or `cp` < 1.
absl::StatusOr<RankTable> RankTableFromRecord(const std::string& record_json, int cp);

// The table as `ringctl top` prints it (no header, no escapes), one line per rank and one per CP
// group, e.g.
//   RANK  CP  ATTN s   ATTN CPU s  COMM WAIT s  RING WAIT s  SENT      PEAK MEM
//   0     0   0.0123   ...                                                       <- slowest
std::string FormatRankTable(const RankTable& table);

// {"step", "step_seconds", "slowest_rank", "ranks": [{rank, cp_group, attention_seconds, …,
// "slowest"}], "cp_groups": [{cp_group, ranks, max_attention_seconds, min_attention_seconds,
// imbalance}]} as one line; `job_id` first.
std::string RankTableJson(const std::string& job_id, const RankTable& table);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_RANK_TABLE_H_
