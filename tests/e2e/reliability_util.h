// What the reliability tests share (reliability_test.cc, tls_reliability_test.cc): the debug
// config as a restartable job, the uninterrupted run to compare with, the stored records, the
// times of a recovery, and the fixture that starts a cluster whose agents share one checkpoint
// root.
#ifndef RINGTRAIN_TESTS_E2E_RELIABILITY_UTIL_H_
#define RINGTRAIN_TESTS_E2E_RELIABILITY_UTIL_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/e2e/local_cluster.h"

namespace ringtrain::testing {

using Clock = std::chrono::steady_clock;

inline constexpr int kSteps = 24;

double SecondsSince(Clock::time_point start);

// The debug config as a job of kSteps steps on a dp × cp mesh that checkpoints every 5 steps and
// may restart `max_restarts` times after 1 s.
std::vector<std::string> Restartable(int dp, int cp, int max_restarts, double comm_timeout = 10);

// The uninterrupted run: the same config through ringtrain-run (checkpoints off), its records by
// step (1-based index 0..kSteps-1).
std::vector<std::map<std::string, std::string>> Uninterrupted(const LocalCluster& cluster,
                                                              int nproc,
                                                              const std::vector<std::string>& job);

// Every stored step record of the job (WatchJob replays them once each, in order).
std::vector<std::string> StoredRecords(LocalCluster& cluster, const std::string& job_id);

// The step records the job's last run wrote on the worker that ran its rank 0: they start after
// the checkpoint it resumed from, and include the steps the failed run had already reported.
std::vector<std::map<std::string, std::string>> LastRunRecords(const LocalCluster& cluster,
                                                               const std::string& job_id,
                                                               int workers);

// Every step stored once, in order, and each loss bitwise the uninterrupted run's; the last run's
// own records (the recomputed steps too) likewise. Returns the step the last run resumed after.
int ExpectBitwiseResume(LocalCluster& cluster, const std::string& job_id, int workers,
                        const std::vector<std::map<std::string, std::string>>& expected);

// How long after `start` the job was first seen RESTARTING, RUNNING again, and past `step`.
struct RecoveryTimes {
  double detected = -1;  // RESTARTING
  double running = -1;   // RUNNING in its next run
  double training = -1;  // a step beyond the one it had reached
};
RecoveryTimes WatchRecovery(LocalCluster& cluster, const std::string& job_id, int64_t step,
                            Clock::time_point start, double timeout);
void PrintRecovery(const char* what, const RecoveryTimes& t, int64_t failed_at, int resumed_after);

// A job underway: submitted, past `step`, and the trainer of the rank a test is about to fail.
struct Underway {
  v1::Job job;
  pid_t trainer = -1;  // -1 (after a test failure) when it was not found
  int64_t step = 0;    // the job's last reported step when it was found
};
Underway SubmitAndRunTo(LocalCluster& cluster, const std::vector<std::string>& overrides, int rank,
                        int64_t step = 8);

// Whether the job reports a step after `seen`, or SUCCEEDS, within 60 s of a coordinator's
// return. Its trainers keep training while the coordinator is away, so on a fast machine they may
// have finished every step before their agents are back; the job's end is its progress then.
bool StepsOnOrEnds(LocalCluster& cluster, const std::string& job_id, int64_t seen);

// The job once it has ended, after a test failure unless it SUCCEEDED.
v1::Job Succeeded(LocalCluster& cluster, const std::string& job_id);

class ReliabilityTest : public ::testing::Test {
 protected:
  // `workers` agents sharing one checkpoint root; a 4 s heartbeat timeout so a lost agent costs
  // seconds, not the default 10.
  std::unique_ptr<LocalCluster> Start(int workers, std::vector<std::string> coordinator = {},
                                      std::vector<std::string> agent = {},
                                      Protection protection = Protection::kPlaintext,
                                      StartOrder order = StartOrder::kCoordinatorFirst);

  TempDir checkpoints_;
};

}  // namespace ringtrain::testing

#endif  // RINGTRAIN_TESTS_E2E_RELIABILITY_UTIL_H_
