// WorkerRegistry (coordinator/worker_registry.h) on its own: ids, liveness, purging and the views
// the scheduler and ListWorkers take; times are given, never read from a clock.
#include "coordinator/worker_registry.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

class NullChannel : public AgentChannel {
 public:
  void Send(const v1::CoordinatorMessage&) override {}
  void Close(const absl::Status& status) override { closed = status; }
  absl::Status closed;
};

Worker& Add(WorkerRegistry& registry, const std::string& id, const std::string& kind,
            AgentChannel* channel) {
  Worker& w = registry.Register(id);
  w.info = {id, kind, "host-a", "10.0.0.1:7000", false};
  w.channel = channel;
  w.last_heartbeat = kT0;
  return w;
}

TEST(WorkerRegistryTest, NewIdsNeverTakeAnIdAnEarlierCoordinatorHandedOut) {
  WorkerRegistry registry;
  EXPECT_EQ(registry.NewId(), "worker-1");
  registry.Reserve("worker-7");
  registry.Reserve("not-a-worker-9");
  registry.Reserve("worker-3");
  EXPECT_EQ(registry.NewId(), "worker-8");
  EXPECT_EQ(registry.NewId(), "worker-9");
}

TEST(WorkerRegistryTest, NewIdsNeverTakeAnIdAnAgentAskedFor) {
  WorkerRegistry registry;
  NullChannel channel;
  Add(registry, "worker-0", "cpu", &channel);  // as `ringctl up` asks: worker-0, worker-1, ...
  Add(registry, "worker-1", "cpu", &channel);
  EXPECT_EQ(registry.NewId(), "worker-2");
  Add(registry, "worker-5", "cpu", &channel);
  Add(registry, "ringtrain-worker-9", "cpu", &channel);  // a pod's name: not "worker-N"
  EXPECT_EQ(registry.NewId(), "worker-6");
  EXPECT_EQ(registry.NewId(), "worker-7");
}

TEST(WorkerRegistryTest, AnIdIsFreeUnlessALiveWorkerHoldsIt) {
  WorkerRegistry registry;
  EXPECT_TRUE(registry.CheckFree("worker-0").ok());  // never registered
  NullChannel channel;
  Worker& connected = Add(registry, "worker-0", "cpu", &channel);
  connected.info.host_label = "node-3";
  const absl::Status held = registry.CheckFree("worker-0");
  EXPECT_EQ(held.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(held.message()), HasSubstr("\"worker-0\""));
  EXPECT_THAT(std::string(held.message()), HasSubstr("host \"node-3\""));
  EXPECT_THAT(std::string(held.message()), HasSubstr("another --worker-id"));

  // Its session ended but it is not lost yet: still held, and the error says when it frees.
  connected.channel = nullptr;
  const absl::Status disconnected = registry.CheckFree("worker-0");
  EXPECT_EQ(disconnected.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(disconnected.message()), HasSubstr("declared lost"));

  // Lost (its job released): free, and a registration gets a fresh entry, not the lost one's.
  connected.Assign("job-000001", 0, 0);
  connected.refusals_logged.insert("bad_credential");
  connected.MarkLost(kT0, "no heartbeat");
  EXPECT_TRUE(registry.CheckFree("worker-0").ok());
  Worker& again = registry.Register("worker-0");
  EXPECT_EQ(again.state, WorkerState::kIdle);
  EXPECT_TRUE(again.job_id.empty());
  EXPECT_EQ(again.rank, -1);
  EXPECT_TRUE(again.refusals_logged.empty());
  EXPECT_EQ(registry.workers().size(), 1u);
}

TEST(WorkerRegistryTest, OnlyTheWorkerRunningARankOfThatRunOwnsIt) {
  WorkerRegistry registry;
  NullChannel channel;
  Worker& w = Add(registry, "worker-1", "cpu", &channel);
  EXPECT_FALSE(w.OwnsRank("job-000001", 0, 0));
  w.Assign("job-000001", 1, 2);
  EXPECT_TRUE(w.OwnsRank("job-000001", 1, 2));
  EXPECT_FALSE(w.OwnsRank("job-000001", 1, 1));  // an earlier run
  EXPECT_FALSE(w.OwnsRank("job-000001", 0, 2));
  EXPECT_FALSE(w.OwnsRank("job-000002", 1, 2));
  w.Release();
  EXPECT_EQ(w.state, WorkerState::kIdle);
  EXPECT_FALSE(w.OwnsRank("job-000001", 1, 2));
}

TEST(WorkerRegistryTest, TheSchedulerSeesLiveWorkersIdleOnlyWhenConnectedAndFree) {
  WorkerRegistry registry;
  NullChannel a, c;
  Add(registry, "worker-1", "cpu", &a);
  Add(registry, "worker-2", "cpu", nullptr);  // between sessions
  Add(registry, "worker-3", "cuda", &c).Assign("job-000001", 0, 0);
  Add(registry, "worker-4", "cpu", nullptr).MarkLost(kT0, "gone");
  std::vector<std::string> idle, all;
  for (const WorkerInfo& info : registry.Schedulable()) {
    all.push_back(info.worker_id);
    if (info.idle) idle.push_back(info.worker_id);
  }
  EXPECT_THAT(all, ElementsAre("worker-1", "worker-2", "worker-3"));
  EXPECT_THAT(idle, ElementsAre("worker-1"));
  EXPECT_EQ(registry.LiveByKind(), (std::map<std::string, int64_t>{{"cpu", 2}, {"cuda", 1}}));
  const std::map<std::string, int> by_state = {
      {"idle", 1}, {"busy", 1}, {"disconnected", 1}, {"lost", 1}};
  EXPECT_EQ(registry.CountByState(), by_state);
  ASSERT_EQ(registry.List().size(), 4u);
  EXPECT_EQ(registry.List()[2].job_id(), "job-000001");
}

TEST(WorkerRegistryTest, ALostWorkerIsClosedFreedAndPurgedOnlyAfterItsTime) {
  WorkerRegistry registry;
  NullChannel channel;
  Worker& w = Add(registry, "worker-1", "cpu", &channel);
  w.Assign("job-000001", 0, 0);
  w.MarkLost(kT0, "no heartbeat for 10s");
  EXPECT_EQ(channel.closed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(w.channel, nullptr);
  EXPECT_TRUE(w.job_id.empty());
  EXPECT_TRUE(registry.Purge(kT0 + absl::Minutes(9), absl::Minutes(10)).empty());
  EXPECT_THAT(registry.Purge(kT0 + absl::Minutes(10), absl::Minutes(10)), ElementsAre("worker-1"));
  EXPECT_EQ(registry.Find("worker-1"), nullptr);
}

TEST(WorkerRegistryTest, WorkersExpectedBackArePurgedUnlessTheyRegister) {
  WorkerRegistry registry;
  registry.ExpectBack("worker-1", kT0 + absl::Minutes(10));
  registry.ExpectBack("worker-2", kT0 + absl::Minutes(10));
  Add(registry, "worker-2", "cpu", nullptr);  // came back
  EXPECT_THAT(registry.Purge(kT0 + absl::Minutes(10), absl::Minutes(10)), ElementsAre("worker-1"));
  EXPECT_NE(registry.Find("worker-2"), nullptr);
}

TEST(WorkerRegistryTest, SilentWorkersAreThoseNotLostPastTheTimeout) {
  WorkerRegistry registry;
  Add(registry, "worker-1", "cpu", nullptr);
  Add(registry, "worker-2", "cpu", nullptr).last_heartbeat = kT0 + absl::Seconds(8);
  Add(registry, "worker-3", "cpu", nullptr).MarkLost(kT0, "gone");
  std::vector<std::string> silent;
  for (Worker* w : registry.Silent(kT0 + absl::Seconds(11), absl::Seconds(10))) {
    silent.push_back(w->info.worker_id);
  }
  EXPECT_THAT(silent, ElementsAre("worker-1"));
}

}  // namespace
}  // namespace ringtrain
