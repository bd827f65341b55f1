#include "coordinator/step_ranges.h"

#include <algorithm>

namespace ringtrain {
namespace {

std::string Name(const StepRange& r) {
  return r.first == r.last ? std::to_string(r.first)
                           : std::to_string(r.first) + "-" + std::to_string(r.last);
}

}  // namespace

std::vector<StepRange> MissingSteps(const std::vector<int64_t>& present, int64_t total,
                                    int64_t first) {
  std::vector<StepRange> missing;
  int64_t next = first;  // the first step not yet known to be present
  for (const int64_t step : present) {
    if (step < next) continue;  // a repeat, or below 1
    if (step > total) break;
    if (step > next) missing.push_back({next, step - 1});
    next = step + 1;
  }
  if (next <= total) missing.push_back({next, total});
  return missing;
}

int64_t CountSteps(const std::vector<StepRange>& ranges) {
  int64_t n = 0;
  for (const StepRange& r : ranges) n += r.last - r.first + 1;
  return n;
}

std::string DescribeSteps(const std::vector<StepRange>& ranges) {
  if (ranges.empty()) return "no steps";
  const int64_t count = CountSteps(ranges);
  std::string text = count == 1 ? "step " : "steps ";
  constexpr size_t kNamed = 5;
  const size_t named = ranges.size() <= kNamed + 1 ? ranges.size() : kNamed;
  for (size_t i = 0; i < named; ++i) {
    if (i > 0) text += i + 1 == named && named == ranges.size() ? " and " : ", ";
    text += Name(ranges[i]);
  }
  if (named < ranges.size()) {
    std::vector<StepRange> rest(ranges.begin() + static_cast<std::ptrdiff_t>(named), ranges.end());
    text += " and " + std::to_string(CountSteps(rest)) + " more steps";
  }
  return text;
}

}  // namespace ringtrain
