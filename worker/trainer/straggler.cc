#include "worker/trainer/straggler.h"

#include <algorithm>

namespace ringtrain {
namespace {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + long(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  return (*std::max_element(values.begin(), values.begin() + long(mid)) + upper) / 2;
}

}  // namespace

std::vector<double> ComputeSeconds(const std::vector<RankFigures>& ranks) {
  double pairs_sum = 0;
  bool every_rank_has_pairs = !ranks.empty();
  for (const RankFigures& r : ranks) {
    pairs_sum += r.attention_pairs;
    every_rank_has_pairs = every_rank_has_pairs && r.attention_pairs > 0;
  }
  const double mean_pairs = ranks.empty() ? 0 : pairs_sum / double(ranks.size());
  std::vector<double> seconds;
  seconds.reserve(ranks.size());
  for (const RankFigures& r : ranks) {
    double attention = r.attention_seconds;
    if (every_rank_has_pairs) attention *= mean_pairs / r.attention_pairs;
    seconds.push_back(std::max(0.0, r.compute_seconds - r.attention_seconds + attention));
  }
  return seconds;
}

StragglerDetector::StragglerDetector(int64_t window, double threshold)
    : window_(std::max<int64_t>(1, window)), threshold_(threshold) {}

std::optional<Straggler> StragglerDetector::Observe(const std::vector<RankFigures>& ranks) {
  if (ranks.size() < 2) return std::nullopt;
  const std::vector<double> seconds = ComputeSeconds(ranks);
  const size_t slowest = size_t(std::max_element(seconds.begin(), seconds.end()) - seconds.begin());
  const auto peer_of = [&](size_t rank) {
    std::vector<double> others;
    for (size_t r = 0; r < seconds.size(); ++r) {
      if (r != rank) others.push_back(seconds[r]);
    }
    return Median(std::move(others));
  };
  const double peer = peer_of(slowest);
  Candidate candidate;
  if (peer > 0 && seconds[slowest] >= threshold_ * peer) {
    candidate.rank = ranks[slowest].rank;
    candidate.ratio = seconds[slowest] / peer;
  }
  recent_.push_back(candidate);
  if (int64_t(recent_.size()) > window_) recent_.pop_front();
  const auto steps_as_candidate = [&](int64_t rank) {
    return std::count_if(recent_.begin(), recent_.end(),
                         [rank](const Candidate& c) { return c.rank == rank; });
  };
  if (candidate.rank >= 0 && steps_as_candidate(candidate.rank) == window_) {
    named_ = candidate.rank;  // a new one, or the same again
  } else if (named_ >= 0 && steps_as_candidate(named_) == 0) {
    named_ = -1;
  }
  if (named_ < 0) return std::nullopt;
  std::vector<double> ratios;
  for (const Candidate& c : recent_) {
    if (c.rank == named_) ratios.push_back(c.ratio);
  }
  const auto at = std::find_if(ranks.begin(), ranks.end(),
                               [this](const RankFigures& r) { return r.rank == named_; });
  if (at == ranks.end()) return std::nullopt;  // not among this step's ranks
  const size_t index = size_t(at - ranks.begin());
  Straggler named;
  named.rank = named_;
  named.ratio = Median(ratios);
  named.seconds = seconds[index];
  named.peer_seconds = peer_of(index);
  return named;
}

}  // namespace ringtrain
