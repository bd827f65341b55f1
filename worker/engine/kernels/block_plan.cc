#include "worker/engine/kernels/block_plan.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ringtrain {
namespace {

// Consecutive positions p, p+1, …: local indices [begin, end) hold positions first, first+1, ….
struct Run {
  int64_t begin, end, first;
  int64_t last() const { return first + (end - begin) - 1; }
  int64_t Local(int64_t position) const { return begin + (position - first); }
};

std::vector<Run> Runs(const std::vector<int64_t>& positions) {
  std::vector<Run> runs;
  for (int64_t i = 0; i < int64_t(positions.size()); ++i) {
    if (runs.empty() || positions[i] != runs.back().last() + 1) {
      runs.push_back({i, i + 1, positions[i]});
    } else {
      runs.back().end = i + 1;
    }
  }
  return runs;
}

// Runs cut where the document changes too: each holds one document of batch row `row`.
std::vector<Run> DocumentRuns(const std::vector<int64_t>& positions, const DocumentMask& mask,
                              int64_t row) {
  const std::vector<int64_t>& starts = mask.starts[size_t(row)];
  std::vector<Run> runs;
  for (int64_t i = 0; i < int64_t(positions.size()); ++i) {
    const int64_t p = positions[size_t(i)];
    if (runs.empty() || p != runs.back().last() + 1 || starts[size_t(p)] != starts[size_t(p - 1)]) {
      runs.push_back({i, i + 1, p});
    } else {
      runs.back().end = i + 1;
    }
  }
  return runs;
}

bool StrictlyIncreasing(const std::vector<int64_t>& p) {
  for (size_t i = 1; i < p.size(); ++i) {
    if (p[i] <= p[i - 1]) return false;
  }
  return true;
}

// The pieces of one query run against one key run, positions [a, b] × [c, d].
void AddPieces(const Run& q, const Run& k, std::vector<FusedCall>* calls) {
  const int64_t a = q.first, b = q.last();
  int64_t c = k.first;
  const int64_t d = k.last();
  if (c > b) return;  // every key after every query
  if (d <= a) {       // every key at or before every query
    calls->push_back({{q.begin, q.end}, {k.begin, k.end}, false});
    return;
  }
  if (c < a) {  // keys before the first query: seen by all of them
    calls->push_back({{q.begin, q.end}, {k.begin, k.Local(a)}, false});
    c = a;
  }
  // Queries before c see none of the keys left; [c, min(b, d)] against itself is the triangle.
  const int64_t m = std::min(b, d);
  calls->push_back({{q.Local(c), q.Local(m) + 1}, {k.Local(c), k.Local(m) + 1}, true});
  // Queries after the last key see every key left (keys after the last query are hidden).
  if (d < b) calls->push_back({{q.Local(d) + 1, q.end}, {k.Local(c), k.end}, false});
}

auto Key(const FusedCall& c) { return std::make_tuple(c.q.begin, c.q.end, c.k.begin, c.k.end); }

// Joins full calls that share their query range and touch in keys, or share their key range and
// touch in queries, until nothing more joins; the result is sorted.
void Coalesce(std::vector<FusedCall>* calls) {
  bool joined = true;
  while (joined) {
    joined = false;
    std::sort(calls->begin(), calls->end(),
              [](const FusedCall& x, const FusedCall& y) { return Key(x) < Key(y); });
    for (size_t i = 0; i < calls->size() && !joined; ++i) {
      for (size_t j = 0; j < calls->size() && !joined; ++j) {
        FusedCall& x = (*calls)[i];
        const FusedCall& y = (*calls)[j];
        if (i == j || x.causal || y.causal) continue;
        if (x.q == y.q && x.k.end == y.k.begin) {
          x.k.end = y.k.end;
          joined = true;
        } else if (x.k == y.k && x.q.end == y.q.begin) {
          x.q.end = y.q.end;
          joined = true;
        }
        if (joined) calls->erase(calls->begin() + int64_t(j));
      }
    }
  }
}

}  // namespace

std::optional<std::vector<FusedCall>> PlanFusedCalls(const std::vector<int64_t>& q_positions,
                                                     const std::vector<int64_t>& k_positions,
                                                     bool causal_mask) {
  const int64_t lq = int64_t(q_positions.size()), lk = int64_t(k_positions.size());
  if (lq == 0 || lk == 0) return std::vector<FusedCall>{};
  if (!causal_mask) return std::vector<FusedCall>{{{0, lq}, {0, lk}, false}};
  // The whole block in one call when it can be: the same increasing positions (a rank's own block
  // under either layout) is the triangle on local indices; all keys before all queries is full.
  if (q_positions == k_positions && StrictlyIncreasing(q_positions)) {
    return std::vector<FusedCall>{{{0, lq}, {0, lk}, true}};
  }
  const auto [q_min, q_max] = std::minmax_element(q_positions.begin(), q_positions.end());
  const auto [k_min, k_max] = std::minmax_element(k_positions.begin(), k_positions.end());
  if (*k_max <= *q_min) return std::vector<FusedCall>{{{0, lq}, {0, lk}, false}};
  if (*k_min > *q_max) return std::vector<FusedCall>{};

  const std::vector<Run> q_runs = Runs(q_positions), k_runs = Runs(k_positions);
  if (q_runs.size() * k_runs.size() > kMaxFusedCalls) return std::nullopt;
  std::vector<FusedCall> calls;
  for (const Run& q : q_runs) {
    for (const Run& k : k_runs) AddPieces(q, k, &calls);
  }
  Coalesce(&calls);
  if (calls.size() > kMaxFusedCalls) return std::nullopt;
  return calls;
}

std::optional<std::vector<FusedCall>> PlanDocumentCalls(const std::vector<int64_t>& q_positions,
                                                        const std::vector<int64_t>& k_positions,
                                                        const DocumentMask& mask, int64_t row) {
  if (q_positions.empty() || k_positions.empty()) return std::vector<FusedCall>{};
  const std::vector<int64_t>& starts = mask.starts[size_t(row)];
  const std::vector<Run> q_runs = DocumentRuns(q_positions, mask, row);
  const std::vector<Run> k_runs = DocumentRuns(k_positions, mask, row);
  std::vector<FusedCall> calls;
  for (const Run& q : q_runs) {
    for (const Run& k : k_runs) {
      if (starts[size_t(q.first)] != starts[size_t(k.first)]) continue;  // other documents
      AddPieces(q, k, &calls);
      if (calls.size() > 4 * kMaxFusedCalls) return std::nullopt;
    }
  }
  Coalesce(&calls);
  if (calls.size() > kMaxFusedCalls) return std::nullopt;
  return calls;
}

std::string DescribePlan(const std::vector<FusedCall>& calls) {
  if (calls.empty()) return "(no call: every key is hidden)";
  return absl::StrJoin(calls, ", ", [](std::string* out, const FusedCall& c) {
    absl::StrAppend(out, "q[", c.q.begin, ",", c.q.end, ")×k[", c.k.begin, ",", c.k.end, ")",
                    c.causal ? " causal" : "");
  });
}

}  // namespace ringtrain
