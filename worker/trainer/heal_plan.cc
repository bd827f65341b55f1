#include "worker/trainer/heal_plan.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/record/heal_instruction.h"

namespace ringtrain {
namespace {

constexpr size_t kRowLength = 7 + 2 * kMaxHealSteps;

void PutSteps(const std::vector<int64_t>& steps, std::vector<double>* out) {
  for (int i = 0; i < kMaxHealSteps; ++i) {
    out->push_back(i < int(steps.size()) ? double(steps[size_t(i)]) : -1.0);
  }
}

std::vector<int64_t> GetSteps(const std::vector<double>& values, size_t first) {
  std::vector<int64_t> steps;
  for (size_t i = first; i < first + kMaxHealSteps; ++i) {
    if (values[i] >= 0) steps.push_back(int64_t(values[i]));
  }
  return steps;
}

}  // namespace

std::vector<double> HealRowToDoubles(const HealRow& row) {
  std::vector<double> out = {
      row.survivor ? 1.0 : 0.0, row.flat_elements, row.rng_bytes, row.tag_pid, row.tag_ms,
      double(row.buddy_offset), row.host_id};
  PutSteps(row.own_steps, &out);
  PutSteps(row.held_steps, &out);
  return out;
}

absl::StatusOr<HealRow> HealRowFromDoubles(const std::vector<double>& values) {
  if (values.size() != kRowLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("a heal row holds ", kRowLength, " numbers, not ", values.size()));
  }
  HealRow row;
  row.survivor = values[0] != 0;
  row.flat_elements = values[1];
  row.rng_bytes = values[2];
  row.tag_pid = values[3];
  row.tag_ms = values[4];
  row.buddy_offset = int64_t(values[5]);
  row.host_id = values[6];
  row.own_steps = GetSteps(values, 7);
  row.held_steps = GetSteps(values, 7 + kMaxHealSteps);
  return row;
}

std::optional<int64_t> RunBuddyOffset(const std::vector<HealRow>& rows) {
  for (const HealRow& row : rows) {
    if (row.survivor) return row.buddy_offset;
  }
  return std::nullopt;
}

std::optional<int64_t> ChooseRollbackStep(const std::vector<HealRow>& rows, int64_t offset) {
  const int64_t world = int64_t(rows.size());
  std::optional<std::set<int64_t>> common;  // steps every rank checked so far can restore
  for (int64_t r = 0; r < world; ++r) {
    const HealRow& row = rows[size_t(r)];
    std::set<int64_t> can;
    if (row.survivor) {
      can.insert(row.own_steps.begin(), row.own_steps.end());
    } else {
      const HealRow& holder = rows[size_t(SnapshotBuddy(r, world, offset))];
      if (!holder.survivor) return std::nullopt;
      can.insert(holder.held_steps.begin(), holder.held_steps.end());
    }
    if (!common) {
      common = can;
      continue;
    }
    std::set<int64_t> both;
    std::set_intersection(common->begin(), common->end(), can.begin(), can.end(),
                          std::inserter(both, both.end()));
    common = std::move(both);
  }
  if (!common || common->empty() || *common->rbegin() <= 0) return std::nullopt;
  return *common->rbegin();
}

}  // namespace ringtrain
