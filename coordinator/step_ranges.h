// Which of a job's steps 1..N the store lacks, as ranges, and how to name them in a message.
// Pure; part of ringtrain_job (no abseil, no SQLite).
#ifndef RINGTRAIN_COORDINATOR_STEP_RANGES_H_
#define RINGTRAIN_COORDINATOR_STEP_RANGES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain {

// Steps first..last, both included.
struct StepRange {
  int64_t first = 0;
  int64_t last = 0;

  bool operator==(const StepRange& other) const {
    return first == other.first && last == other.last;
  }
};

// The steps of first..total that `present` (ascending; repeats and steps outside first..total
// allowed) does not hold, as ascending, disjoint ranges. `first` is 1 but for a job resumed from
// another job's checkpoint (--resume-from), which computes only the steps after it.
std::vector<StepRange> MissingSteps(const std::vector<int64_t>& present, int64_t total,
                                    int64_t first = 1);

// How many steps `ranges` cover.
int64_t CountSteps(const std::vector<StepRange>& ranges);

// "step 7", "steps 16-40", "steps 3, 7-9 and 12"; past 6 ranges, the first 5 and "and N more
// steps" (a message stays short however scattered the gaps are).
std::string DescribeSteps(const std::vector<StepRange>& ranges);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_STEP_RANGES_H_
