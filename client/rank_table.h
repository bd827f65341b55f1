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
#include "common/record/step_record.h"

namespace ringtrain {

// A rank's figures of the step as the record holds them (common/record/step_record.h: a new
// per-rank figure is one member there; the JSON of RankTableJson follows, a text column is one
// row of the column table in rank_table.cc), with where the rank sits.
struct RankRow : RankFigures {
  int cp_group = 0;        // rank / cp (cp innermost)
  int cp_rank = 0;         // rank % cp: its place in its CP group
  bool slowest = false;    // see RankTable::slowest_rank
  bool straggler = false;  // see RankTable::straggler_rank
};

struct CpGroupFigures {
  int cp_group = 0;
  std::vector<int> ranks;
  double max_attention_seconds = 0;
  double min_attention_seconds = 0;
  // max / min attention time in the group: 1.0 is perfect balance. 0 when min is 0 (undefined).
  double imbalance = 0;
  // max / mean attention work (visible query-key pairs, attention_pairs) per rank: what the load
  // balancer planned. 0 when the record holds no work.
  double work_imbalance = 0;
};

struct RankTable {
  int64_t step = 0;
  int cp = 1;  // ranks per CP group
  double step_seconds = 0;
  std::vector<RankRow> rows;           // by rank
  std::vector<CpGroupFigures> groups;  // by cp_group
  // The rank with the most attention compute in the step: its CP group's ring waits for it (the
  // others show it as communication wait). -1 when there are no rows.
  int slowest_rank = -1;
  // The rank the trainer named a straggler after this step (worker/trainer/straggler.h:
  // consistently slower at computing than the others), and by how much; -1 and 0 when none.
  int straggler_rank = -1;
  double straggler_ratio = 0;
};

// Reads a step record (one JSON object, ParseStepRecord; a figure the record lacks or holds as
// null reads 0). INVALID_ARGUMENT when it is not one, has no integer `step`, no or an empty
// `ranks` array (a one-rank trainer writes none), or `cp` < 1.
absl::StatusOr<RankTable> RankTableFromRecord(const std::string& record_json, int cp);

// The table as `ringctl top` prints it (no header, no escapes), one line per rank and one per CP
// group, e.g.
//   RANK  GROUP CP    ATTN s   ATTN CPU s  COMM WAIT  RING WAIT  RING XFER  SENT      PEAK MEM
//   1     0     1/2   0.0123   ...                                                   <- slowest
// (GROUP: the rank's CP group; CP: its place in the group, CpPlace; RING WAIT: the rank's ring
// waits, a slower peer's lateness included; RING XFER: its ring's transfer time compute did not
// hide, ring_transfer_exposed_seconds).
// and, when the trainer named one, "straggler: rank 1, compute 1.83x the median of the others'".
std::string FormatRankTable(const RankTable& table);

// {"step", "step_seconds", "slowest_rank", "straggler_rank", "straggler_ratio", "ranks": [{rank,
// cp_group, cp_rank, attention_seconds, …, "slowest", "straggler"}], "cp_groups": [{cp_group,
// ranks, max_attention_seconds, min_attention_seconds, imbalance}]} as one line; `job_id` first.
std::string RankTableJson(const std::string& job_id, const RankTable& table);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_RANK_TABLE_H_
