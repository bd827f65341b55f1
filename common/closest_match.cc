#include "common/closest_match.h"

#include <algorithm>
#include <string>
#include <vector>

namespace ringtrain {
namespace {

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string ClosestMatch(absl::string_view word, const std::vector<std::string>& candidates) {
  // A third of the word may be wrong (at least a transposition's 2 edits, but never the whole
  // word).
  if (word.empty()) return "";
  const size_t limit =
      std::min(std::max<size_t>(2, word.size() / 3), std::max<size_t>(1, word.size() - 1));
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    const size_t d = EditDistance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace ringtrain
