#include "client/rank_table.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/job_format.h"

namespace ringtrain {
namespace {

using nlohmann::json;

double Number(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

absl::StatusOr<RankTable> RankTableFromRecord(const std::string& record_json, int cp) {
  if (cp < 1) return absl::InvalidArgumentError(absl::StrCat("cp = ", cp, ": need >= 1"));
  const json record = json::parse(record_json, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) return absl::InvalidArgumentError("the step record is not a JSON object");
  const auto step = record.find("step");
  if (step == record.end() || !step->is_number_integer()) {
    return absl::InvalidArgumentError("the step record has no integer \"step\"");
  }
  const auto ranks = record.find("ranks");
  if (ranks == record.end() || !ranks->is_array()) {
    return absl::InvalidArgumentError(
        "the step record has no \"ranks\" array (a job of one rank reports no per-rank figures)");
  }
  RankTable table;
  table.step = step->get<int64_t>();
  table.step_seconds = Number(record, "step_seconds");
  for (size_t i = 0; i < ranks->size(); ++i) {
    const json& r = (*ranks)[i];
    if (!r.is_object()) return absl::InvalidArgumentError("an entry of \"ranks\" is not an object");
    RankRow row;
    row.rank = r.contains("rank") && r["rank"].is_number_integer() ? r["rank"].get<int>()
                                                                    : static_cast<int>(i);
    row.cp_group = row.rank / cp;
    row.attention_seconds = Number(r, "attention_seconds");
    row.attention_cpu_seconds = Number(r, "attention_cpu_seconds");
    row.comm_wait_seconds = Number(r, "comm_wait_seconds");
    row.ring_wait_seconds = Number(r, "ring_wait_seconds");
    row.bytes_sent = Number(r, "bytes_sent");
    row.peak_memory_bytes = Number(r, "peak_memory_bytes");
    row.device_memory_peak_bytes = Number(r, "device_memory_peak_bytes");
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
    g.ranks.push_back(row.rank);
    g.max_attention_seconds = std::max(g.max_attention_seconds, row.attention_seconds);
    g.min_attention_seconds = std::min(g.min_attention_seconds, row.attention_seconds);
  }
  for (auto& [id, g] : groups) {
    g.imbalance = g.min_attention_seconds > 0 ? g.max_attention_seconds / g.min_attention_seconds : 0;
    table.groups.push_back(g);
  }
  size_t slowest = 0;
  for (size_t i = 1; i < table.rows.size(); ++i) {
    if (table.rows[i].attention_seconds > table.rows[slowest].attention_seconds) slowest = i;
  }
  if (!table.rows.empty()) {
    table.rows[slowest].slowest = true;
    table.slowest_rank = table.rows[slowest].rank;
  }
  return table;
}

std::string FormatRankTable(const RankTable& table) {
  std::string out = absl::StrFormat("%-5s %-3s %10s %10s %10s %10s %11s %11s\n", "RANK", "CP",
                                    "ATTN s", "ATTN CPU s", "COMM WAIT", "RING WAIT", "SENT",
                                    "PEAK MEM");
  for (const RankRow& r : table.rows) {
    absl::StrAppendFormat(&out, "%-5d %-3d %10.4f %10.4f %10.4f %10.4f %11s %11s%s\n", r.rank,
                          r.cp_group, r.attention_seconds, r.attention_cpu_seconds,
                          r.comm_wait_seconds, r.ring_wait_seconds,
                          FormatBytes(static_cast<uint64_t>(r.bytes_sent)),
                          FormatBytes(static_cast<uint64_t>(r.peak_memory_bytes)),
                          r.slowest ? "  <- slowest" : "");
  }
  for (const CpGroupFigures& g : table.groups) {
    absl::StrAppendFormat(&out, "cp group %d: attention max/min %s (max %.4f s, min %.4f s)\n",
                          g.cp_group, g.imbalance > 0 ? absl::StrFormat("%.3f", g.imbalance) : "-",
                          g.max_attention_seconds, g.min_attention_seconds);
  }
  return out;
}

std::string RankTableJson(const std::string& job_id, const RankTable& table) {
  json out = json::object();
  out["job_id"] = job_id;
  out["step"] = table.step;
  out["step_seconds"] = table.step_seconds;
  out["slowest_rank"] = table.slowest_rank;
  json ranks = json::array();
  for (const RankRow& r : table.rows) {
    ranks.push_back({{"rank", r.rank},
                     {"cp_group", r.cp_group},
                     {"attention_seconds", r.attention_seconds},
                     {"attention_cpu_seconds", r.attention_cpu_seconds},
                     {"comm_wait_seconds", r.comm_wait_seconds},
                     {"ring_wait_seconds", r.ring_wait_seconds},
                     {"bytes_sent", r.bytes_sent},
                     {"peak_memory_bytes", r.peak_memory_bytes},
                     {"device_memory_peak_bytes", r.device_memory_peak_bytes},
                     {"slowest", r.slowest}});
  }
  out["ranks"] = std::move(ranks);
  json groups = json::array();
  for (const CpGroupFigures& g : table.groups) {
    groups.push_back({{"cp_group", g.cp_group},
                      {"ranks", g.ranks},
                      {"max_attention_seconds", g.max_attention_seconds},
                      {"min_attention_seconds", g.min_attention_seconds},
                      {"imbalance", g.imbalance}});
  }
  out["cp_groups"] = std::move(groups);
  return out.dump();
}

}  // namespace ringtrain
