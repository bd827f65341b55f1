// The Cluster unit tests' fixture: a Cluster over a job store in a temporary file, fake agent
// channels that record what the coordinator sends down, a ManualClock shared by the store and the
// cluster (timeouts are crossed by advancing it, never by sleeping), and helpers that play an
// agent's messages.
#ifndef RINGTRAIN_TESTS_UNIT_CLUSTER_FIXTURE_H_
#define RINGTRAIN_TESTS_UNIT_CLUSTER_FIXTURE_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/clock.h"
#include "coordinator/cluster.h"
#include "coordinator/event_hub.h"
#include "coordinator/job_store.h"
#include "tests/unit/cluster_test_util.h"

namespace ringtrain {

class EventLog : public JobEventSink {
 public:
  void OnJobEvent(const v1::JobEvent& event) override { events.push_back(event); }
  std::vector<v1::JobEvent> events;
};

// A Cluster over a job store in a temporary file, with fake agent channels and a ManualClock.
class ClusterFixture : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen() {
    cluster_.reset();
    store_.reset();
    store_ = *JobStore::Open(db_path_, &clock_);
    ClusterOptions options;
    options.clock = &clock_;
    options.worker_timeout = worker_timeout_;
    options.adopt_timeout = absl::Milliseconds(300);
    options.rendezvous_port_first = 41000;
    options.rendezvous_port_last = 41100;
    options.unschedulable_timeout = absl::Seconds(5);
    auto cluster = Cluster::Create(store_.get(), &hub_, options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }

  void TearDown() override {
    cluster_.reset();
    store_.reset();
    std::filesystem::remove(db_path_);
    std::filesystem::remove(db_path_ + "-wal");
    std::filesystem::remove(db_path_ + "-shm");
    std::filesystem::remove(db_path_ + ".stamp");  // else a later run with this pid is refused
  }

  // Registers and attaches `n` cpu workers on host `host`; returns their ids.
  std::vector<std::string> AddWorkers(int n, const std::string& host = "h1") {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) {
      v1::RegisterRequest request;
      request.set_device_kind("cpu");
      request.set_device("cpu");
      request.set_host_label(host);
      request.set_address("127.0.0.1");
      auto response = cluster_->Register(request);
      EXPECT_TRUE(response.ok()) << response.status();
      const std::string id = response->worker_id();
      credentials_[id] = response->credential();
      EXPECT_TRUE(cluster_->AttachSession(id, credentials_[id], &channels_[id]).ok());
      ids.push_back(id);
    }
    return ids;
  }

  // After Reopen: the agent `old_id` registers again with its credential, naming the rank of
  // `job_id` it still runs, and attaches its session; the rank must be adopted under the old id.
  void ComeBack(const std::string& old_id, const std::string& job_id, int rank) {
    v1::RegisterRequest request;
    request.set_device_kind("cpu");
    request.set_device("cpu");
    request.set_host_label("h1");
    request.set_address("127.0.0.1");
    request.set_previous_worker_id(old_id);
    request.set_previous_credential(credentials_[old_id]);
    request.set_running_job_id(job_id);
    request.set_running_rank(rank);
    absl::StatusOr<v1::RegisterResponse> response = cluster_->Register(request);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->worker_id(), old_id);
    EXPECT_TRUE(response->rank_adopted());
    credentials_[old_id] = response->credential();
    ASSERT_TRUE(cluster_->AttachSession(old_id, credentials_[old_id], &channels_[old_id]).ok());
  }

  absl::StatusOr<JobRecord> Submit(int dp, int cp, int steps = 3,
                                   const std::vector<std::string>& more = {}) {
    v1::SubmitJobRequest request;
    request.set_config_toml(kTinyJobConfig);
    request.add_overrides("parallelism.data_parallel_replicate_degree=" + std::to_string(dp));
    request.add_overrides("parallelism.context_parallel_degree=" + std::to_string(cp));
    request.add_overrides("training.steps=" + std::to_string(steps));
    for (const std::string& o : more) request.add_overrides(o);
    return cluster_->Submit(request);
  }

  JobState StateOf(const std::string& job_id) { return store_->GetJob(job_id)->state; }

  // The assignments of run `attempt` sent to each worker of `job_id`, by rank.
  std::map<int, std::string> AssignedWorkers(const std::string& job_id, int attempt = 0) {
    std::map<int, std::string> by_rank;
    for (const auto& [id, channel] : channels_) {
      for (const auto& m : channel.sent) {
        if (m.has_assignment() && m.assignment().job_id() == job_id &&
            m.assignment().attempt() == attempt) {
          by_rank[m.assignment().rank()] = id;
        }
      }
    }
    return by_rank;
  }

  // What the cluster answers: "" when taken, else why it was refused.
  std::string Agent(const std::string& worker_id, v1::AgentMessage message) {
    return cluster_->OnAgentMessage(worker_id, message);
  }
  std::string Started(const std::string& worker_id, const std::string& job_id, int rank,
                      int attempt = 0) {
    v1::AgentMessage m;
    m.mutable_rank_started()->set_job_id(job_id);
    m.mutable_rank_started()->set_rank(rank);
    m.mutable_rank_started()->set_attempt(attempt);
    return Agent(worker_id, m);
  }
  std::string Report(const std::string& worker_id, const std::string& job_id, int step, double loss,
                     int attempt = 0) {
    v1::AgentMessage m;
    m.mutable_rank_report()->set_job_id(job_id);
    m.mutable_rank_report()->set_attempt(attempt);
    m.mutable_rank_report()->set_record_json("{\"step\": " + std::to_string(step) +
                                             ", \"loss\": " + std::to_string(loss) + "}");
    return Agent(worker_id, m);
  }
  std::string Exit(const std::string& worker_id, const std::string& job_id, int rank, int status,
                   int signal = 0, int attempt = 0) {
    v1::AgentMessage m;
    m.mutable_rank_exit()->set_job_id(job_id);
    m.mutable_rank_exit()->set_rank(rank);
    m.mutable_rank_exit()->set_exit_status(status);
    m.mutable_rank_exit()->set_signal(signal);
    m.mutable_rank_exit()->set_attempt(attempt);
    m.mutable_rank_exit()->set_stderr_tail("E boom\n");
    return Agent(worker_id, m);
  }
  std::string Hung(const std::string& worker_id, const std::string& job_id, int rank,
                   int attempt = 0) {
    v1::AgentMessage m;
    m.mutable_rank_hung()->set_job_id(job_id);
    m.mutable_rank_hung()->set_rank(rank);
    m.mutable_rank_hung()->set_attempt(attempt);
    m.mutable_rank_hung()->set_reason("no heartbeat from the trainer for 10.0 s");
    return Agent(worker_id, m);
  }
  // Every rank of `job_id`'s run `attempt` starts.
  void StartAll(const std::string& job_id, int attempt = 0) {
    for (const auto& [rank, w] : AssignedWorkers(job_id, attempt)) {
      Started(w, job_id, rank, attempt);
    }
  }
  // The clock moves on by `by` while every worker but `except` keeps sending heartbeats (every
  // 100 ms, and once more at the end): only `except` can be lost by it.
  void Beat(absl::Duration by, const std::string& except = "") {
    const auto beat_all = [&] {
      for (const auto& [id, channel] : channels_) {
        if (id == except) continue;
        v1::AgentMessage beat;
        beat.mutable_heartbeat();
        Agent(id, beat);
      }
    };
    for (absl::Duration left = by; left > absl::ZeroDuration();) {
      beat_all();
      const absl::Duration step = std::min(left, absl::Milliseconds(100));
      clock_.Advance(step);
      left -= step;
    }
    beat_all();
  }
  int IdleWorkers() {
    int idle = 0;
    for (const auto& w : cluster_->ListWorkers()) idle += w.state() == v1::WORKER_STATE_IDLE;
    return idle;
  }

  const std::string db_path_ = (std::filesystem::temp_directory_path() /
                                ("cluster_test_" + std::to_string(::getpid()) + ".db"))
                                   .string();
  absl::Duration worker_timeout_ = absl::Milliseconds(300);  // set before Reopen() to change
  ManualClock clock_;
  EventHub hub_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<Cluster> cluster_;
  std::map<std::string, FakeChannel> channels_;
  std::map<std::string, std::string> credentials_;  // by worker id, from Register
};

}  // namespace ringtrain

#endif  // RINGTRAIN_TESTS_UNIT_CLUSTER_FIXTURE_H_
