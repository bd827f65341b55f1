// load_bench: the load test at full size, with the step-time threshold the test leaves out.
//
// Runs rounds of tests/e2e/load_round.h on 127.0.0.1, unwatched and watched alternately (--pairs
// pairs, each round on a fresh local cluster of 2 workers, so machine noise falls on both kinds
// alike): one job of the debug config (cp 2, --steps steps) alone, then the same job with
// --watchers concurrent WatchJob streams on it and --queued jobs behind it. Every round checks that
// nothing was lost (see load_round.h). Prints a table of the median step time (steps >= 3 of every
// round of a kind, pooled), the coordinator's peak RSS, the CPU the coordinator and the clients
// (this process) used, and the events delivered; exits 1 when anything was lost or the watched
// median step time is more than 2 % above the unwatched one. The clients run on the same machine,
// so with as many cores as ranks their CPU time is taken from the trainers too.
//   load_bench [--watchers 200] [--queued 100] [--steps 40] [--pairs 3] [--bin-dir build/bin]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/load_round.h"
#include "tests/e2e/local_cluster.h"

namespace {

using ringtrain::testing::LoadRoundOptions;
using ringtrain::testing::LoadRoundResult;

// The bound: watching may cost at most 2 % of the step time.
constexpr double kMaxStepTimeRatio = 1.02;
constexpr int kWorkers = 2;

struct Kind {
  std::vector<double> step_seconds;  // pooled over the rounds
  int64_t peak_rss_kib = 0;          // the highest VmHWM of any round
  int64_t events = 0;
  double coordinator_cpu_seconds = 0;  // summed over the rounds
  double client_cpu_seconds = 0;
  int problems = 0;
};

double MiB(int64_t kib) { return kib / 1024.0; }

// The cluster's own helpers report through gtest (no test is running here, so they land in the
// ad hoc result and are printed); a round with any such failure counts as a problem.
int GtestFailures() {
  const testing::TestResult& result = testing::UnitTest::GetInstance()->ad_hoc_test_result();
  int failed = 0;
  for (int i = 0; i < result.total_part_count(); ++i) {
    failed += result.GetTestPartResult(i).failed();
  }
  return failed;
}

void Round(const LoadRoundOptions& options, int pair, const char* name, Kind* kind) {
  const int failures_before = GtestFailures();
  LoadRoundResult result;
  {
    ringtrain::testing::LocalCluster cluster(kWorkers);
    result = ringtrain::testing::RunLoadRound(cluster, options);
  }
  const int problems = static_cast<int>(result.problems.size()) + GtestFailures() - failures_before;
  for (const std::string& line : result.problems) std::printf("  problem: %s\n", line.c_str());
  std::printf(
      "pair %d %-9s median step %.4f s, coordinator RSS before %.1f MiB, loaded %.1f MiB, "
      "peak %.1f MiB, after %.1f MiB; %lld events delivered; subscribed within %.1f s; "
      "%d streams reopened%s; CPU coordinator %.2f s, this process %.2f s; %.1f s; %s\n",
      pair, name, result.median_step_seconds, MiB(result.before.rss_kib),
      MiB(result.loaded.rss_kib), MiB(result.after.hwm_kib), MiB(result.after.rss_kib),
      static_cast<long long>(result.events_delivered), result.subscribe_seconds,
      result.streams_reopened,
      result.open_error.empty() ? "" : (" (" + result.open_error + ")").c_str(),
      result.coordinator_cpu_seconds, result.client_cpu_seconds, result.seconds,
      problems == 0 ? "nothing lost" : "PROBLEMS");
  std::fflush(stdout);
  kind->step_seconds.insert(kind->step_seconds.end(), result.step_seconds.begin(),
                            result.step_seconds.end());
  kind->peak_rss_kib = std::max(kind->peak_rss_kib, result.after.hwm_kib);
  kind->events += result.events_delivered;
  kind->coordinator_cpu_seconds += result.coordinator_cpu_seconds;
  kind->client_cpu_seconds += result.client_cpu_seconds;
  kind->problems += problems;
}

}  // namespace

int main(int argc, char** argv) {
  LoadRoundOptions watched;
  watched.watchers = 200;
  watched.queued = 100;
  watched.steps = 40;
  watched.cp = kWorkers;
  watched.timeout_seconds = 600;
  int pairs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int value = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--watchers")) {
      watched.watchers = value;
    } else if (!std::strcmp(argv[i], "--queued")) {
      watched.queued = value;
    } else if (!std::strcmp(argv[i], "--steps")) {
      watched.steps = value;
    } else if (!std::strcmp(argv[i], "--pairs")) {
      pairs = value;
    } else if (!std::strcmp(argv[i], "--bin-dir")) {
      setenv("RINGTRAIN_BIN_DIR", argv[i + 1], 1);  // where LocalCluster finds the binaries
    } else {
      std::fprintf(stderr,
                   "load_bench: unknown flag %s\nusage: load_bench [--watchers 200] "
                   "[--queued 100] [--steps 40] [--pairs 3] [--bin-dir build/bin]\n",
                   argv[i]);
      return 2;
    }
  }
  if (watched.steps <= ringtrain::testing::kFirstTimedStep || pairs < 1) {
    std::fprintf(stderr, "load_bench: --steps must be above %lld and --pairs at least 1\n",
                 static_cast<long long>(ringtrain::testing::kFirstTimedStep));
    return 2;
  }
  LoadRoundOptions unwatched = watched;
  unwatched.watchers = 0;
  unwatched.queued = 0;

  Kind alone, loaded;
  for (int pair = 1; pair <= pairs; ++pair) {
    Round(unwatched, pair, "unwatched", &alone);
    Round(watched, pair, "watched", &loaded);
  }

  const double alone_step = ringtrain::testing::Median(alone.step_seconds);
  const double loaded_step = ringtrain::testing::Median(loaded.step_seconds);
  const double ratio = loaded_step / alone_step;
  std::printf(
      "\nload_bench: %d watchers, %d queued jobs, %d steps (cp %d), %d pairs; median step "
      "time of steps >= %lld, all rounds of a kind pooled\n",
      watched.watchers, watched.queued, watched.steps, kWorkers, pairs,
      static_cast<long long>(ringtrain::testing::kFirstTimedStep));
  std::printf("%-30s %12s %12s %8s\n", "figure", "unwatched", "watched", "ratio");
  std::printf("%-30s %12.4f %12.4f %8.3f\n", "median step time (s)", alone_step, loaded_step,
              ratio);
  std::printf("%-30s %12.1f %12.1f %8.2f\n", "coordinator peak RSS (MiB)", MiB(alone.peak_rss_kib),
              MiB(loaded.peak_rss_kib),
              static_cast<double>(loaded.peak_rss_kib) / std::max<int64_t>(1, alone.peak_rss_kib));
  std::printf("%-30s %12.2f %12.2f %8.2f\n", "coordinator CPU per round (s)",
              alone.coordinator_cpu_seconds / pairs, loaded.coordinator_cpu_seconds / pairs,
              loaded.coordinator_cpu_seconds / alone.coordinator_cpu_seconds);
  std::printf("%-30s %12.2f %12.2f %8.2f\n", "client CPU per round (s)",
              alone.client_cpu_seconds / pairs, loaded.client_cpu_seconds / pairs,
              loaded.client_cpu_seconds / alone.client_cpu_seconds);
  std::printf("%-30s %12lld %12lld %8s\n", "events delivered", static_cast<long long>(alone.events),
              static_cast<long long>(loaded.events), "-");
  std::printf("%-30s %12d %12d %8s\n", "problems (something lost)", alone.problems, loaded.problems,
              "-");
  const bool fast_enough = ratio <= kMaxStepTimeRatio;
  std::printf("watched step time %+.1f %% against unwatched (threshold +%.0f %%): %s\n",
              (ratio - 1) * 100, (kMaxStepTimeRatio - 1) * 100, fast_enough ? "PASS" : "FAIL");
  return fast_enough && alone.problems == 0 && loaded.problems == 0 ? 0 : 1;
}
