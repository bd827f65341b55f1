// One round of the load check, shared by tests/e2e/load_test.cc (reduced size, asserts nothing is
// lost and memory stays bounded) and tests/bench/load_bench.cc (full size, holds the step-time
// threshold): on a LocalCluster, one small job (configs/debug_model.toml, dp 1 × cp ranks) runs
// while `watchers` clients follow it with WatchJob from step 0 and `queued` more jobs of the same
// config wait behind it (FIFO: the job holds every worker). The round checks what the clients saw
// against the store and measures the job's step times and the coordinator's memory. With watchers
// or a queue, a gate job of the same config holds the workers until every watcher is counted and
// every queued job submitted and checked, and is then cancelled: the watched job runs all its
// steps watched, and the queue is cancelled while it runs.
//
// "Nothing lost" means, for every watcher: its stream ends OK; its step events are exactly those
// of a replay of the finished job from the store — steps 1..N, each once, in order, record_json
// byte for byte (so every watcher holds the same bytes); its state changes are the replay's; its
// last event is the final state change (SUCCEEDED). (A stream that fails UNAVAILABLE before any
// event never reached the coordinator's fan-out; it is opened again and counted, not hidden.)
// For the queued jobs: each is listed once by
// ListJobs (followed page by page), GetJob returns it QUEUED with the submitted config and
// overrides, and once cancelled each is CANCELLED without ever having been placed.
#ifndef RINGTRAIN_TESTS_E2E_LOAD_ROUND_H_
#define RINGTRAIN_TESTS_E2E_LOAD_ROUND_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/e2e/local_cluster.h"

namespace ringtrain::testing {

struct LoadRoundOptions {
  int watchers = 0;  // WatchJob streams, one thread and one connection each (as separate clients)
  int queued = 0;    // jobs submitted behind the watched one, checked while QUEUED, then cancelled
  int steps = 30;    // of the watched job; enough that it outlives the queue's cancellation
  int cp = 2;        // its context-parallel degree: should equal the cluster's workers
  double timeout_seconds = 150;  // the whole round; no client call's deadline goes past it
};

// From /proc/<pid>/status, in KiB; -1 when unread.
struct ProcessMemory {
  int64_t rss_kib = -1;  // VmRSS: resident now
  int64_t hwm_kib = -1;  // VmHWM: the most ever resident (the process's lifetime)
};
ProcessMemory ReadProcessMemory(pid_t pid);
// User + system CPU seconds `pid` has used so far (/proc/<pid>/stat); -1 when unread.
double CpuSeconds(pid_t pid);

// Step times are taken from this step on: the first steps include the ranks' warm-up.
inline constexpr int64_t kFirstTimedStep = 3;

struct LoadRoundResult {
  std::string job_id;
  std::vector<double> step_seconds;  // of steps kFirstTimedStep..N, as the trainer reported them
  double median_step_seconds = 0;    // their median
  ProcessMemory before;              // the coordinator, as the round starts
  ProcessMemory loaded;              // every watcher subscribed, every queued job submitted
  ProcessMemory after;               // job ended, watchers closed, queue cancelled (hwm: peak)
  int64_t events_delivered = 0;      // events read by all watchers together
  // CPU time used during the round by the coordinator, and by this process (the watchers' threads
  // and the checks): on a machine with as many cores as ranks, theirs is taken from the trainers.
  double coordinator_cpu_seconds = 0;
  double client_cpu_seconds = 0;
  // Watch streams that failed UNAVAILABLE before their first event (they never reached the
  // fan-out: the connection could not be made) and were opened again; not a loss, but printed.
  int streams_reopened = 0;
  std::string open_error;             // the first such failure's message
  double subscribe_seconds = 0;       // from the first watcher's start until all were counted
  double cancel_seconds = 0;          // cancelling the queue, while the watched job ran
  double seconds = 0;                 // submit to idle workers
  std::vector<std::string> problems;  // what was lost or wrong, one line each; empty when none
};

// Runs one round on `cluster` (its workers must all be idle, and there should be exactly `cp` of
// them so the queued jobs wait). Failures of the cluster's own helpers go to gtest as usual; every
// check of the round itself lands in `problems`, so a benchmark can report them too.
LoadRoundResult RunLoadRound(LocalCluster& cluster, const LoadRoundOptions& options);

// The median of `values` (the mean of the two middle ones for an even count); 0 when empty.
double Median(std::vector<double> values);

}  // namespace ringtrain::testing

#endif  // RINGTRAIN_TESTS_E2E_LOAD_ROUND_H_
