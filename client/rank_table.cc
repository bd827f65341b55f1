#include "client/rank_table.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/job_format.h"

namespace ringtrain {
namespace {

using nlohmann::json;

// A column of the text table: seconds as "%10.4f", bytes as "%11s" (FormatBytes).
struct Column {
  const char* header;
  double RankFigures::*member;
  bool bytes;
};

constexpr Column kColumns[] = {
    {"ATTN s", &RankFigures::attention_seconds, false},
    {"ATTN CPU s", &RankFigures::attention_cpu_seconds, false},
    {"COMM WAIT", &RankFigures::comm_wait_seconds, false},
    {"RING WAIT", &RankFigures::ring_wait_seconds, false},
    {"RING XFER", &RankFigures::ring_transfer_exposed_seconds, false},
    {"SENT", &RankFigures::bytes_sent, true},
    {"PEAK MEM", &RankFigures::peak_memory_bytes, true},
};

// The table shows a figure the record holds as null (written for a non-finite value) as 0.
double ZeroIfNotFinite(double value) { return std::isfinite(value) ? value : 0.0; }

}  // namespace

absl::StatusOr<RankTable> RankTableFromRecord(const std::string& record_json, int cp) {
  if (cp < 1) return absl::InvalidArgumentError(absl::StrCat("cp = ", cp, ": need >= 1"));
  absl::StatusOr<std::optional<StepRecord>> record =
      ParseStepRecord(record_json, MissingFigure::kZero);
  if (!record.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the step record: ", record.status().message()));
  }
  if (!record->has_value()) {
    return absl::InvalidArgumentError("the step record has no integer \"step\"");
  }
  if ((*record)->ranks.empty()) {
    return absl::InvalidArgumentError(
        "the step record has no \"ranks\" array (a job of one rank reports no per-rank figures)");
  }
  const StepRecord& step = **record;
  RankTable table;
  table.step = step.step;
  table.cp = cp;
  table.step_seconds = ZeroIfNotFinite(step.step_seconds);
  for (const RankFigures& figures : step.ranks) {
    RankRow row;
    static_cast<RankFigures&>(row) = figures;
    for (const auto& f : kRankFields) row.*f.member = ZeroIfNotFinite(row.*f.member);
    row.cp_group = static_cast<int>(row.rank / cp);
    row.cp_rank = static_cast<int>(row.rank % cp);
    table.rows.push_back(row);
  }
  std::sort(table.rows.begin(), table.rows.end(),
            [](const RankRow& a, const RankRow& b) { return a.rank < b.rank; });
  std::map<int, CpGroupFigures> groups;
  for (const RankRow& row : table.rows) {
    CpGroupFigures& g = groups[row.cp_group];
    if (g.ranks.empty()) {
      g.cp_group = row.cp_group;
      g.max_attention_seconds = g.min_attention_seconds = row.attention_seconds;
    }
    g.ranks.push_back(static_cast<int>(row.rank));
    g.max_attention_seconds = std::max(g.max_attention_seconds, row.attention_seconds);
    g.min_attention_seconds = std::min(g.min_attention_seconds, row.attention_seconds);
  }
  for (auto& [id, g] : groups) {
    g.imbalance =
        g.min_attention_seconds > 0 ? g.max_attention_seconds / g.min_attention_seconds : 0;
    double max_pairs = 0, sum_pairs = 0;
    for (const RankRow& row : table.rows) {
      if (row.cp_group != g.cp_group) continue;
      max_pairs = std::max(max_pairs, row.attention_pairs);
      sum_pairs += row.attention_pairs;
    }
    g.work_imbalance = sum_pairs > 0 ? max_pairs * double(g.ranks.size()) / sum_pairs : 0;
    table.groups.push_back(g);
  }
  size_t slowest = 0;
  for (size_t i = 1; i < table.rows.size(); ++i) {
    if (table.rows[i].attention_seconds > table.rows[slowest].attention_seconds) slowest = i;
  }
  if (!table.rows.empty()) {
    table.rows[slowest].slowest = true;
    table.slowest_rank = static_cast<int>(table.rows[slowest].rank);
  }
  if (std::isfinite(step.straggler_ratio) && step.straggler_ratio > 0) {
    table.straggler_rank = static_cast<int>(step.straggler_rank);
    table.straggler_ratio = step.straggler_ratio;
    for (RankRow& row : table.rows) row.straggler = row.rank == table.straggler_rank;
  }
  return table;
}

std::string FormatRankTable(const RankTable& table) {
  std::string out = absl::StrFormat("%-5s %-5s %-5s", "RANK", "GROUP", "CP");
  for (const Column& c : kColumns) {
    absl::StrAppendFormat(&out, c.bytes ? " %11s" : " %10s", c.header);
  }
  out += "\n";
  for (const RankRow& r : table.rows) {
    absl::StrAppendFormat(&out, "%-5d %-5d %-5s", r.rank, r.cp_group, CpPlace(r.rank, table.cp));
    for (const Column& c : kColumns) {
      const double value = r.*c.member;
      if (c.bytes) {
        absl::StrAppendFormat(&out, " %11s", FormatBytes(static_cast<uint64_t>(value)));
      } else {
        absl::StrAppendFormat(&out, " %10.4f", value);
      }
    }
    absl::StrAppend(&out, r.slowest ? "  <- slowest" : "", r.straggler ? "  <- straggler" : "",
                    "\n");
  }
  for (const CpGroupFigures& g : table.groups) {
    absl::StrAppendFormat(&out, "cp group %d: attention max/min %s (max %.4f s, min %.4f s)",
                          g.cp_group, g.imbalance > 0 ? absl::StrFormat("%.3f", g.imbalance) : "-",
                          g.max_attention_seconds, g.min_attention_seconds);
    if (g.work_imbalance > 0) {
      absl::StrAppendFormat(&out, "; work max/mean %.3f (visible query-key pairs)",
                            g.work_imbalance);
    }
    out += "\n";
  }
  if (table.straggler_rank >= 0) {
    absl::StrAppendFormat(&out, "straggler: rank %d, compute %.2fx the median of the others'\n",
                          table.straggler_rank, table.straggler_ratio);
  }
  return out;
}

std::string RankTableJson(const std::string& job_id, const RankTable& table) {
  json out = json::object();
  out["job_id"] = job_id;
  out["step"] = table.step;
  out["step_seconds"] = table.step_seconds;
  out["slowest_rank"] = table.slowest_rank;
  out["straggler_rank"] = table.straggler_rank;
  out["straggler_ratio"] = table.straggler_ratio;
  json ranks = json::array();
  for (const RankRow& r : table.rows) {
    json entry = {{"rank", r.rank},
                  {"cp_group", r.cp_group},
                  {"cp_rank", r.cp_rank},
                  {"slowest", r.slowest},
                  {"straggler", r.straggler}};
    for (const auto& f : kRankFields) entry[f.name] = r.*f.member;
    ranks.push_back(std::move(entry));
  }
  out["ranks"] = std::move(ranks);
  json groups = json::array();
  for (const CpGroupFigures& g : table.groups) {
    groups.push_back({{"cp_group", g.cp_group},
                      {"ranks", g.ranks},
                      {"max_attention_seconds", g.max_attention_seconds},
                      {"min_attention_seconds", g.min_attention_seconds},
                      {"imbalance", g.imbalance},
                      {"work_imbalance", g.work_imbalance}});
  }
  out["cp_groups"] = std::move(groups);
  return out.dump();
}

}  // namespace ringtrain
