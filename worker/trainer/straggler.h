// Straggler detection: which rank is consistently slower than its peers at computing, not at
// waiting. Every collective (the CP ring, the gradient all-reduce) makes every rank wait for the
// slowest, so a slow rank's time shows up as the others' communication wait; this names it.
//
// Each step every rank's compute time is its own step wall time minus its communication waits
// (comm_wait_seconds), with its attention time scaled to the mean attention work of the ranks
// (attention_pairs), so a rank the load balancer gave more work by design (balancer "none", a
// document plan) is not mistaken for a slow one. The step's candidate is the rank with the most
// compute, if that is at least `threshold` × the median of the other ranks'. A rank is named once
// it has been the candidate for `window` steps in a row, and stays named until it has not been the
// candidate for `window` steps in a row (or another rank has been, for as long), so a named rank
// does not flicker with one quick step. Torch-free and deterministic: every rank gathers the same
// figures and so names the same rank.
#ifndef RINGTRAIN_WORKER_TRAINER_STRAGGLER_H_
#define RINGTRAIN_WORKER_TRAINER_STRAGGLER_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "common/record/step_record.h"

namespace ringtrain {

struct Straggler {
  int64_t rank = -1;
  // Its compute / the median of the others', the median over the window's steps where it was the
  // candidate.
  double ratio = 0;
  double seconds = 0;       // its compute time in the latest step
  double peer_seconds = 0;  // the median of the others' in the latest step
};

// A rank's compute time of the step, as above. Ranks without attention work (cp = 1, or no pairs
// reported) keep their attention time as it is.
std::vector<double> ComputeSeconds(const std::vector<RankFigures>& ranks);

class StragglerDetector {
 public:
  // window >= 1 steps; threshold > 1.
  StragglerDetector(int64_t window, double threshold);

  // One step's figures of every rank (at least 2; fewer never names anyone). Returns the rank
  // named after this step, if any.
  std::optional<Straggler> Observe(const std::vector<RankFigures>& ranks);

 private:
  struct Candidate {
    int64_t rank = -1;  // -1: no rank was slower by the threshold in that step
    double ratio = 0;
  };
  int64_t window_;
  double threshold_;
  std::deque<Candidate> recent_;  // the last `window_` steps, oldest first
  int64_t named_ = -1;            // the rank named after the last step, -1 when none
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_TRAINER_STRAGGLER_H_
