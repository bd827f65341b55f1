// Worker identity and message ownership, without gRPC: a Cluster over an SQLite job store with
// fake agent channels, as in cluster_test.cc. A "fake" worker registers like any agent and then
// tries to speak for ranks it does not run, to take over another worker's session, and to claim
// another worker's id after a restart; each attempt must be refused, counted, and leave the real
// job as it was. Also: the bounds on Register's fields and the purge of lost workers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "coordinator/clock.h"
#include "coordinator/cluster.h"
#include "coordinator/event_hub.h"
#include "coordinator/job_store.h"
#include "coordinator/worker_credential.h"
#include "tests/unit/cluster_test_util.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::RegisterRequest CpuWorker() {
  v1::RegisterRequest request;
  request.set_device_kind("cpu");
  request.set_device("cpu");
  request.set_host_label("h1");
  request.set_address("127.0.0.1");
  return request;
}

class ClusterIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen() {
    cluster_.reset();
    store_.reset();
    store_ = *JobStore::Open(db_path_, &clock_);
    ClusterOptions options;
    options.clock = &clock_;
    options.worker_timeout = absl::Milliseconds(300);
    options.adopt_timeout = absl::Seconds(5);
    options.purge_lost_after = absl::Seconds(60);
    options.rendezvous_port_first = 41200;
    options.rendezvous_port_last = 41300;
    auto cluster = Cluster::Create(store_.get(), &hub_, options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }

  void TearDown() override {
    cluster_.reset();
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm", ".stamp"}) {
      std::filesystem::remove(db_path_ + suffix);
    }
  }

  // Registers and attaches one cpu worker, asking for `requested` when not empty; returns its id
  // (its credential in credentials_).
  std::string AddWorker(const std::string& requested = "") {
    v1::RegisterRequest request = CpuWorker();
    request.set_requested_worker_id(requested);
    auto response = cluster_->Register(request);
    EXPECT_TRUE(response.ok()) << response.status();
    const std::string id = response->worker_id();
    credentials_[id] = response->credential();
    EXPECT_TRUE(cluster_->AttachSession(id, credentials_[id], &channels_[id]).ok());
    return id;
  }

  // A running 2-rank job on two real workers (asking for `ids` when given), plus an idle fake
  // worker; ranks_ maps rank → worker.
  std::string StartJobWithAFakeWorker(const std::vector<std::string>& ids = {"", ""}) {
    AddWorker(ids[0]);
    AddWorker(ids[1]);
    v1::SubmitJobRequest request;
    request.set_config_toml(kTinyJobConfig);
    request.add_overrides("parallelism.context_parallel_degree=2");
    auto job = cluster_->Submit(request);
    EXPECT_TRUE(job.ok()) << job.status();
    for (const auto& [id, channel] : channels_) {
      for (const auto& m : channel.sent) {
        if (m.has_assignment()) ranks_[m.assignment().rank()] = id;
      }
    }
    fake_ = AddWorker();
    Started(ranks_[0], job->job_id, 0);
    Started(ranks_[1], job->job_id, 1);
    EXPECT_EQ(StateOf(job->job_id), JobState::kRunning);
    return job->job_id;
  }

  void Send(const std::string& worker_id, const v1::AgentMessage& m) {
    cluster_->OnAgentMessage(worker_id, m);
  }
  void Started(const std::string& worker_id, const std::string& job_id, int rank) {
    v1::AgentMessage m;
    m.mutable_rank_started()->set_job_id(job_id);
    m.mutable_rank_started()->set_rank(rank);
    Send(worker_id, m);
  }
  void Report(const std::string& worker_id, const std::string& job_id, int rank,
              const std::string& record) {
    v1::AgentMessage m;
    m.mutable_rank_report()->set_job_id(job_id);
    m.mutable_rank_report()->set_rank(rank);
    m.mutable_rank_report()->set_record_json(record);
    Send(worker_id, m);
  }
  void Step(const std::string& worker_id, const std::string& job_id, int rank, int step,
            double loss) {
    Report(worker_id, job_id, rank,
           "{\"step\": " + std::to_string(step) + ", \"loss\": " + std::to_string(loss) + "}");
  }
  void Exit(const std::string& worker_id, const std::string& job_id, int rank, int status) {
    v1::AgentMessage m;
    m.mutable_rank_exit()->set_job_id(job_id);
    m.mutable_rank_exit()->set_rank(rank);
    m.mutable_rank_exit()->set_exit_status(status);
    Send(worker_id, m);
  }

  JobState StateOf(const std::string& job_id) { return store_->GetJob(job_id)->state; }
  int64_t Refused(const std::string& reason) {
    return cluster_->GetCounts().refused_agent_messages_by_reason[reason];
  }
  std::vector<double> StoredLosses(const std::string& job_id) {
    std::vector<double> losses;
    const std::vector<StepEvent> events = *store_->StepEvents(job_id, 0, 0);
    for (const StepEvent& e : events) losses.push_back(e.loss);
    return losses;
  }
  std::vector<std::string> ListedIds() {
    std::vector<std::string> ids;
    for (const v1::Worker& w : cluster_->ListWorkers()) ids.push_back(w.worker_id());
    return ids;
  }

  const std::string db_path_ = (std::filesystem::temp_directory_path() /
                                ("cluster_identity_test_" + std::to_string(::getpid()) + ".db"))
                                   .string();
  ManualClock clock_;
  EventHub hub_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<Cluster> cluster_;
  std::map<std::string, FakeChannel> channels_;
  std::map<std::string, std::string> credentials_;
  std::map<int, std::string> ranks_;
  std::string fake_;
};

TEST(WorkerCredentialTest, RandomHexAndOnlyTheSameSecretMatchesItsDigest) {
  auto a = NewWorkerCredential();
  auto b = NewWorkerCredential();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(*a, *b);
  const std::string digest = CredentialDigest(*a);
  EXPECT_EQ(digest.size(), 64u);
  EXPECT_NE(digest, *a);
  EXPECT_TRUE(CredentialMatches(*a, digest));
  EXPECT_FALSE(CredentialMatches(*b, digest));
  EXPECT_FALSE(CredentialMatches("", digest));
  EXPECT_FALSE(CredentialMatches(*a, ""));
  EXPECT_FALSE(CredentialMatches(*a, digest.substr(1)));
  // SHA-256 of "abc", so the digest is the standard one and not something home-made.
  EXPECT_EQ(CredentialDigest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(ClusterIdentityTest, RegisterGivesEachWorkerItsOwnCredentialAndStoresOnlyItsDigest) {
  const std::string a = AddWorker(), b = AddWorker();
  EXPECT_EQ(credentials_[a].size(), 64u);
  EXPECT_NE(credentials_[a], credentials_[b]);
  EXPECT_EQ(*store_->WorkerCredential(a), CredentialDigest(credentials_[a]));
  EXPECT_EQ(*store_->WorkerCredential("worker-99"), "");
  for (const v1::Worker& w : cluster_->ListWorkers()) {
    EXPECT_THAT(w.DebugString(), Not(HasSubstr(credentials_[w.worker_id()])));
  }
}

TEST_F(ClusterIdentityTest, HelloWithAnotherWorkersIdIsRefusedAndLeavesItsSessionAlone) {
  const std::string real = AddWorker();
  FakeChannel impostor;
  for (const std::string& credential :
       {std::string(), std::string(64, '0'), credentials_[AddWorker()]}) {
    const absl::Status s = cluster_->AttachSession(real, credential, &impostor);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
    EXPECT_THAT(s.message(), HasSubstr(real));
    EXPECT_THAT(s.message(), HasSubstr("credential"));
  }
  EXPECT_EQ(Refused("bad_credential"), 3);
  EXPECT_TRUE(impostor.sent.empty());                // no Welcome, no assignment
  EXPECT_FALSE(channels_[real].closed.has_value());  // the real session was not replaced
  // The real session still gets the work.
  v1::SubmitJobRequest request;
  request.set_config_toml(kTinyJobConfig);
  request.add_overrides("parallelism.context_parallel_degree=2");
  ASSERT_TRUE(cluster_->Submit(request).ok());
  ASSERT_FALSE(channels_[real].sent.empty());
  EXPECT_TRUE(channels_[real].sent.back().has_assignment());
  EXPECT_TRUE(impostor.sent.empty());
  // The right credential on a second stream does replace the first (an agent reconnecting).
  FakeChannel again;
  EXPECT_TRUE(cluster_->AttachSession(real, credentials_[real], &again).ok());
  EXPECT_TRUE(channels_[real].closed.has_value());
}

TEST_F(ClusterIdentityTest, RankMessagesFromAWorkerNotRunningTheRankAreRefused) {
  const std::string job = StartJobWithAFakeWorker();
  Step(ranks_[0], job, 0, 1, 4.0);
  // The fake worker: steps and losses, a failing exit blaming rank 1, exits forging success.
  Step(fake_, job, 0, 2, 0.001);
  Step(fake_, job, 0, 1, 0.001);  // replacing a stored loss
  Started(fake_, job, 0);
  Exit(fake_, job, 1, 1);
  Exit(fake_, job, 0, 0);
  Exit(fake_, job, 1, 0);
  // The worker of rank 1 speaking for rank 0, and for its own rank of another job.
  Step(ranks_[1], job, 0, 2, 0.001);
  Exit(ranks_[1], job, 0, 0);
  Exit(ranks_[1], "job-999999", 1, 0);
  EXPECT_EQ(Refused("not_assigned"), 9);
  EXPECT_EQ(StateOf(job), JobState::kRunning);
  EXPECT_FALSE(store_->GetJob(job)->error.has_value());
  EXPECT_EQ(StoredLosses(job), std::vector<double>({4.0}));
  EXPECT_EQ(store_->GetJob(job)->last_step, 1);

  // The real ranks finish the job with their own figures.
  Step(ranks_[0], job, 0, 2, 3.5);
  Step(ranks_[0], job, 0, 3, 3.0);
  Exit(ranks_[0], job, 0, 0);
  Exit(ranks_[1], job, 1, 0);
  EXPECT_EQ(StateOf(job), JobState::kSucceeded);
  EXPECT_EQ(StoredLosses(job), std::vector<double>({4.0, 3.5, 3.0}));
  EXPECT_EQ(Refused("not_assigned"), 9);
  // Once free, a worker no longer speaks for its old rank.
  Step(ranks_[0], job, 0, 3, 0.5);
  EXPECT_EQ(Refused("not_assigned"), 10);
}

TEST_F(ClusterIdentityTest, StepRecordsOutsideTheJobOrUnparseableAreRefusedAndEachStepIsKeptOnce) {
  const std::string job = StartJobWithAFakeWorker();
  Step(ranks_[0], job, 0, 0, 1.0);  // before the first step
  Step(ranks_[0], job, 0, 4, 1.0);  // past training.steps = 3
  Step(ranks_[0], job, 0, -7, 1.0);
  Report(ranks_[0], job, 0, "{\"step\": \"2\", \"loss\": 1}");
  Report(ranks_[0], job, 0, "{\"step\": 1.5, \"loss\": 1}");
  Report(ranks_[0], job, 0, "not json");
  Report(ranks_[0], job, 0, "[1, 2]");
  EXPECT_EQ(Refused("bad_step"), 7);
  Report(ranks_[0], job, 0, "{\"validation_loss\": 2.5}");  // not a step record: ignored
  EXPECT_EQ(Refused("bad_step"), 7);
  EXPECT_TRUE(StoredLosses(job).empty());

  Step(ranks_[0], job, 0, 1, 4.0);
  Step(ranks_[0], job, 0, 1, 9.0);  // a second record for step 1 does not replace the first
  EXPECT_EQ(StoredLosses(job), std::vector<double>({4.0}));
  EXPECT_DOUBLE_EQ(store_->GetJob(job)->last_loss, 4.0);
  // Rank 1's own records are not the job's history (rank 0's are): not stored, not refused.
  Step(ranks_[1], job, 1, 2, 9.0);
  EXPECT_EQ(StoredLosses(job), std::vector<double>({4.0}));
  EXPECT_EQ(Refused("bad_step"), 7);
  EXPECT_EQ(Refused("not_assigned"), 0);
  EXPECT_EQ(StateOf(job), JobState::kRunning);
}

// The coordinator reads rank 0's records with the shared parser (common/record/step_record.h):
// a "ranks" that is not an array of objects is not a record the trainer writes, so it is refused
// like any other unparseable record, not stored with its figures.
TEST_F(ClusterIdentityTest, StepRecordsWhoseRanksAreNotAnArrayOfObjectsAreRefused) {
  const std::string job = StartJobWithAFakeWorker();
  Report(ranks_[0], job, 0, "{\"step\": 1, \"loss\": 1, \"ranks\": 5}");
  Report(ranks_[0], job, 0, "{\"step\": 1, \"loss\": 1, \"ranks\": [1, 2]}");
  EXPECT_EQ(Refused("bad_step"), 2);
  EXPECT_TRUE(StoredLosses(job).empty());
  Report(ranks_[0], job, 0, "{\"step\": 1, \"loss\": 2.5, \"ranks\": [{\"rank\": 0}]}");
  EXPECT_EQ(Refused("bad_step"), 2);
  EXPECT_EQ(StoredLosses(job), std::vector<double>({2.5}));
}

TEST_F(ClusterIdentityTest, AfterARestartOnlyTheCredentialGetsAnIdAndItsRankBack) {
  const std::string job = StartJobWithAFakeWorker();
  Step(ranks_[0], job, 0, 1, 4.0);
  channels_.clear();
  Reopen();
  v1::RegisterRequest claim = CpuWorker();
  claim.set_previous_worker_id(ranks_[0]);
  claim.set_running_job_id(job);
  claim.set_running_rank(0);
  // The impostor: no credential, then a wrong one (the fake worker's own).
  for (const std::string& credential : {std::string(), credentials_[fake_]}) {
    claim.set_previous_credential(credential);
    auto response = cluster_->Register(claim);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_NE(response->worker_id(), ranks_[0]);
    EXPECT_FALSE(response->rank_adopted());
  }
  EXPECT_EQ(Refused("bad_credential"), 2);
  // An impostor's new id is not one an earlier mesh or registration used.
  for (const std::string& id : ListedIds()) {
    EXPECT_NE(id, ranks_[1]);
    EXPECT_NE(id, fake_);
  }
  // The real agents.
  for (const auto& [rank, id] : ranks_) {
    claim.set_previous_worker_id(id);
    claim.set_previous_credential(credentials_[id]);
    claim.set_running_rank(rank);
    auto response = cluster_->Register(claim);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->worker_id(), id);
    EXPECT_TRUE(response->rank_adopted());
    // A new credential: the old one no longer opens a session.
    EXPECT_NE(response->credential(), credentials_[id]);
    EXPECT_EQ(cluster_->AttachSession(id, credentials_[id], &channels_[id]).code(),
              absl::StatusCode::kUnauthenticated);
    credentials_[id] = response->credential();
    ASSERT_TRUE(cluster_->AttachSession(id, credentials_[id], &channels_[id]).ok());
  }
  Step(ranks_[0], job, 0, 2, 3.5);
  Step(ranks_[0], job, 0, 3, 3.0);
  Exit(ranks_[0], job, 0, 0);
  Exit(ranks_[1], job, 1, 0);
  EXPECT_EQ(StateOf(job), JobState::kSucceeded);
  EXPECT_EQ(StoredLosses(job), std::vector<double>({4.0, 3.5, 3.0}));
}

TEST_F(ClusterIdentityTest, AnAgentGetsTheIdItAsksForUnlessALiveWorkerHoldsIt) {
  EXPECT_EQ(AddWorker("worker-0"), "worker-0");
  EXPECT_EQ(AddWorker("worker-2"), "worker-2");
  EXPECT_EQ(AddWorker(), "worker-3") << "a numbered id skips the ids agents asked for";
  EXPECT_EQ(AddWorker("gpu-node.7"), "gpu-node.7");
  for (const std::string& taken : {"worker-0", "worker-3"}) {  // asked for, and numbered
    v1::RegisterRequest twin = CpuWorker();
    twin.set_host_label("h2");
    twin.set_requested_worker_id(taken);
    auto refused = cluster_->Register(twin);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists) << taken;
    EXPECT_THAT(refused.status().message(), HasSubstr("\"" + taken + "\""));
    EXPECT_THAT(refused.status().message(), HasSubstr("host \"h1\""));  // the holder's
  }
  EXPECT_EQ(ListedIds(),
            (std::vector<std::string>{"gpu-node.7", "worker-0", "worker-2", "worker-3"}));

  // An agent restarted while the coordinator still holds its old session: refused until the old
  // one is declared lost, then its id is its own again.
  cluster_->DetachSession("worker-2", &channels_["worker-2"]);
  v1::RegisterRequest restarted = CpuWorker();
  restarted.set_requested_worker_id("worker-2");
  auto early = cluster_->Register(restarted);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(early.status().message(), HasSubstr("declared lost"));
  for (int i = 0; i < 4; ++i) {  // the others keep their heartbeats; worker-2 goes silent
    clock_.Advance(absl::Milliseconds(100));
    for (const std::string id : {"worker-0", "worker-3", "gpu-node.7"}) {
      v1::AgentMessage beat;
      beat.mutable_heartbeat();
      Send(id, beat);
    }
  }
  cluster_->Tick();
  auto back = cluster_->Register(restarted);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->worker_id(), "worker-2");
  ASSERT_TRUE(cluster_->AttachSession("worker-2", back->credential(), &channels_["w2"]).ok());
  EXPECT_EQ(cluster_->GetCounts().workers_by_state["lost"], 0);
  EXPECT_EQ(cluster_->GetCounts().workers_by_state["idle"], 4);
}

TEST_F(ClusterIdentityTest, AfterACoordinatorRestartAnAgentGetsTheIdItAskedForBack) {
  const std::string job = StartJobWithAFakeWorker({"worker-7", "worker-8"});
  EXPECT_EQ(fake_, "worker-9");
  Step(ranks_[0], job, 0, 1, 4.0);
  channels_.clear();
  Reopen();
  // Numbered ids still skip the ids asked for before the restart (the store's rows).
  EXPECT_EQ(AddWorker(), "worker-10");
  // Rank 0's agent comes back with its credential: its id and its rank.
  v1::RegisterRequest claim = CpuWorker();
  claim.set_requested_worker_id(ranks_[0]);
  claim.set_previous_worker_id(ranks_[0]);
  claim.set_previous_credential(credentials_[ranks_[0]]);
  claim.set_running_job_id(job);
  claim.set_running_rank(0);
  auto proven = cluster_->Register(claim);
  ASSERT_TRUE(proven.ok()) << proven.status();
  EXPECT_EQ(proven->worker_id(), ranks_[0]);
  EXPECT_TRUE(proven->rank_adopted());
  // Rank 1's agent was restarted too (no credential left): its id, but not the rank.
  v1::RegisterRequest fresh = CpuWorker();
  fresh.set_requested_worker_id(ranks_[1]);
  fresh.set_previous_worker_id(ranks_[1]);
  fresh.set_running_job_id(job);
  fresh.set_running_rank(1);
  auto unproven = cluster_->Register(fresh);
  ASSERT_TRUE(unproven.ok()) << unproven.status();
  EXPECT_EQ(unproven->worker_id(), ranks_[1]);
  EXPECT_FALSE(unproven->rank_adopted());
  // A credential proves only the id it was given for: the fake worker's, asking for another id,
  // gets that id as a new worker.
  v1::RegisterRequest other = CpuWorker();
  other.set_previous_worker_id(fake_);
  other.set_previous_credential(credentials_[fake_]);
  other.set_requested_worker_id("worker-11");
  auto mismatched = cluster_->Register(other);
  ASSERT_TRUE(mismatched.ok()) << mismatched.status();
  EXPECT_EQ(mismatched->worker_id(), "worker-11");
  EXPECT_FALSE(mismatched->rank_adopted());
}

TEST_F(ClusterIdentityTest, LostWorkersArePurgedAfterTheConfiguredTime) {
  const std::string a = AddWorker();
  const std::string b = AddWorker();
  for (int i = 0; i < 4; ++i) {  // b keeps its heartbeat; a goes silent
    clock_.Advance(absl::Milliseconds(100));
    v1::AgentMessage beat;
    beat.mutable_heartbeat();
    Send(b, beat);
  }
  cluster_->Tick();
  EXPECT_EQ(cluster_->GetCounts().workers_by_state["lost"], 1);
  EXPECT_EQ(ListedIds(), (std::vector<std::string>{a, b}));
  for (int i = 0; i < 59; ++i) {  // b stays alive; a is lost for just under the minute
    clock_.Advance(absl::Seconds(1));
    v1::AgentMessage beat;
    beat.mutable_heartbeat();
    Send(b, beat);
    cluster_->Tick();
  }
  EXPECT_EQ(ListedIds(), (std::vector<std::string>{a, b}));
  clock_.Advance(absl::Seconds(1));  // a: lost for 60 s
  v1::AgentMessage beat;
  beat.mutable_heartbeat();
  Send(b, beat);
  cluster_->Tick();
  EXPECT_EQ(ListedIds(), std::vector<std::string>{b});
  EXPECT_EQ(*store_->WorkerCredential(a), "");
  EXPECT_NE(*store_->WorkerCredential(b), "");
  EXPECT_EQ(cluster_->GetCounts().workers_by_state["lost"], 0);

  // After a restart, a stored worker that never comes back is purged the same time later.
  Reopen();
  clock_.Advance(absl::Seconds(61));
  cluster_->Tick();
  EXPECT_EQ(*store_->WorkerCredential(b), "");
  v1::RegisterRequest late = CpuWorker();
  late.set_previous_worker_id(b);
  late.set_previous_credential(credentials_[b]);
  auto response = cluster_->Register(late);
  ASSERT_TRUE(response.ok());
  EXPECT_NE(response->worker_id(), b);
}

TEST_F(ClusterIdentityTest, RegisterFieldsAreBoundedAndPrintable) {
  struct Case {
    std::function<void(v1::RegisterRequest&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](auto& r) { r.set_device_kind(""); }, "device_kind"},
      {[](auto& r) { r.set_device_kind("tpu"); }, "device_kind"},
      {[](auto& r) { r.set_device_kind("cpu\x1b[2J"); }, "device_kind"},
      {[](auto& r) { r.set_device(""); }, "device"},
      {[](auto& r) { r.set_device("cuda:0"); }, "device"},  // kind cpu
      {[](auto& r) { r.set_address(""); }, "address"},
      {[](auto& r) { r.set_address(std::string(254, 'a')); }, "address"},
      {[](auto& r) { r.set_address("10.0.0.1\n"); }, "address"},
      {[](auto& r) { r.set_address("host name"); }, "address"},
      {[](auto& r) { r.set_host_label(std::string(254, 'h')); }, "host_label"},
      {[](auto& r) { r.set_host_label("evil\x1b]0;title\x07"); }, "host_label"},
      {[](auto& r) { r.set_host_label("caf\xc3\xa9"); }, "host_label"},
      {[](auto& r) { r.set_device_name(std::string(129, 'n')); }, "device_name"},
      {[](auto& r) { r.set_device_name("NVIDIA\x1b[2J H200"); }, "device_name"},
      {[](auto& r) { r.set_device_name("NVIDIA H200\n"); }, "device_name"},
      {[](auto& r) { r.set_previous_worker_id("worker 1"); }, "previous_worker_id"},
      {[](auto& r) { r.set_requested_worker_id("../worker-1"); }, "requested_worker_id"},
      {[](auto& r) { r.set_requested_worker_id("worker\x1b[2J"); }, "requested_worker_id"},
      {[](auto& r) { r.set_requested_worker_id(std::string(97, 'w')); }, "requested_worker_id"},
      {[](auto& r) { r.set_previous_credential(std::string(129, 'a')); }, "previous_credential"},
      {[](auto& r) { r.set_running_job_id("job\r1"); }, "running_job_id"},
      {[](auto& r) {
         r.set_running_job_id("job-000001");
         r.set_running_rank(-1);
       },
       "running_rank"},
  };
  for (const Case& c : cases) {
    v1::RegisterRequest request = CpuWorker();
    c.edit(request);
    auto response = cluster_->Register(request);
    EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(response.status().message(), HasSubstr(c.field));
    for (char ch : std::string(response.status().message())) {
      EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << c.field << ": the error echoes a raw byte";
    }
  }
  EXPECT_TRUE(cluster_->ListWorkers().empty());
  // What real agents send is accepted: a label with a space, a 253-byte host name, cuda:N.
  v1::RegisterRequest ok = CpuWorker();
  ok.set_host_label("rack 4 node 2");
  ok.set_address(std::string(253, 'a'));
  EXPECT_TRUE(cluster_->Register(ok).ok());
  v1::RegisterRequest gpu = CpuWorker();
  gpu.set_device_kind("cuda");
  gpu.set_device("cuda:3");
  gpu.set_device_name("unknown (this machine has 1 NVIDIA GPU (valid: cuda:0))");
  EXPECT_TRUE(cluster_->Register(gpu).ok());
}

TEST_F(ClusterIdentityTest, ListWorkersReturnsTheRegisteredDevice) {
  v1::RegisterRequest gpu = CpuWorker();
  gpu.set_device_kind("cuda");
  gpu.set_device("cuda:1");
  gpu.set_device_name(std::string(128, 'n'));  // the longest name taken
  gpu.set_device_memory_bytes(150754820096);
  ASSERT_TRUE(cluster_->Register(gpu).ok());
  const std::vector<v1::Worker> workers = cluster_->ListWorkers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].device_kind(), "cuda");
  EXPECT_EQ(workers[0].device(), "cuda:1");
  EXPECT_EQ(workers[0].device_name(), std::string(128, 'n'));
  EXPECT_EQ(workers[0].device_memory_bytes(), 150754820096u);
}

}  // namespace
}  // namespace ringtrain
