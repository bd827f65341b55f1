#include "coordinator/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

WorkerInfo Worker(const std::string& id, const std::string& host, const std::string& kind = "cpu",
                  bool idle = true) {
  return {id, kind, host, host + ":7000", idle};
}

PendingJob Job(const std::string& id, int dp, int cp, const std::string& kind = "cpu",
               int ulysses = 1) {
  return {id, RunMesh{dp * cp, dp, cp, ulysses}, kind};
}

// worker_id → host_label, to see where a placement landed.
std::map<std::string, std::string> HostOf(const std::vector<WorkerInfo>& workers) {
  std::map<std::string, std::string> host;
  for (const WorkerInfo& w : workers) host[w.worker_id] = w.host_label;
  return host;
}

std::set<std::string> HostsOfGroup(const std::vector<RankPlacement>& placement, int cp_group,
                                   const std::map<std::string, std::string>& host_of) {
  std::set<std::string> hosts;
  for (const RankPlacement& p : placement) {
    if (p.cp_group == cp_group) hosts.insert(host_of.at(p.worker_id));
  }
  return hosts;
}

TEST(PlaceRanksTest, KeepsEachCpGroupOnOneHost) {
  // Hosts a:3 and b:2; dp=2 × cp=2. Group 0 goes to a (most free), group 1 to b (the only host
  // still holding two), not a's leftover worker plus one of b's.
  std::vector<WorkerInfo> workers = {Worker("w-a1", "a"), Worker("w-a2", "a"), Worker("w-a3", "a"),
                                     Worker("w-b1", "b"), Worker("w-b2", "b")};
  std::vector<RankPlacement> placement = PlaceRanks(Job("job-000001", 2, 2), workers);
  ASSERT_EQ(placement.size(), 4u);
  auto host_of = HostOf(workers);
  EXPECT_EQ(HostsOfGroup(placement, 0, host_of), std::set<std::string>{"a"});
  EXPECT_EQ(HostsOfGroup(placement, 1, host_of), std::set<std::string>{"b"});
  EXPECT_EQ(placement[0].worker_id, "w-a1");  // rank 0 serves the rendezvous
}

TEST(PlaceRanksTest, RankOrderIsCpInnermost) {
  std::vector<WorkerInfo> workers = {Worker("w1", "h"), Worker("w2", "h"), Worker("w3", "h"),
                                     Worker("w4", "h"), Worker("w5", "h"), Worker("w6", "h")};
  std::vector<RankPlacement> placement = PlaceRanks(Job("job-000001", 3, 2), workers);
  ASSERT_EQ(placement.size(), 6u);
  std::set<std::string> used;
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_EQ(placement[rank].rank, rank);
    EXPECT_EQ(placement[rank].dp_index, rank / 2);
    EXPECT_EQ(placement[rank].cp_group, rank / 2);
    used.insert(placement[rank].worker_id);
  }
  EXPECT_EQ(used.size(), 6u);  // one rank per worker
  EXPECT_EQ(placement[0].worker_id, "w1");
  EXPECT_EQ(placement[5].worker_id, "w6");
}

TEST(PlaceRanksTest, SpreadsAGroupOnlyWhenNoHostHoldsIt) {
  // No host has 3 free workers: each group is spread, taking from the fullest hosts first.
  std::vector<WorkerInfo> workers = {Worker("w-a1", "a"), Worker("w-a2", "a"), Worker("w-b1", "b"),
                                     Worker("w-b2", "b"), Worker("w-c1", "c"), Worker("w-c2", "c")};
  std::vector<RankPlacement> placement = PlaceRanks(Job("job-000001", 2, 3), workers);
  ASSERT_EQ(placement.size(), 6u);
  std::vector<std::string> ids;
  for (const RankPlacement& p : placement) ids.push_back(p.worker_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"w-a1", "w-a2", "w-b1", "w-c1", "w-c2", "w-b2"}));

  // One host could hold a group, the other cannot: the first group stays on one host.
  workers = {Worker("w-a1", "a"), Worker("w-a2", "a"), Worker("w-b1", "b"), Worker("w-c1", "c")};
  placement = PlaceRanks(Job("job-000002", 2, 2), workers);
  ASSERT_EQ(placement.size(), 4u);
  auto host_of = HostOf(workers);
  EXPECT_EQ(HostsOfGroup(placement, 0, host_of), std::set<std::string>{"a"});
  EXPECT_EQ(HostsOfGroup(placement, 1, host_of), (std::set<std::string>{"b", "c"}));
}

TEST(PlaceRanksTest, ASpreadGroupKeepsEachUlyssesGroupOnOneHost) {
  // cp 4 as Ulysses 2 × ring 2 over two hosts of 3: the group is spread, but by Ulysses group.
  const std::vector<WorkerInfo> workers = {Worker("w-a1", "a"), Worker("w-a2", "a"),
                                           Worker("w-a3", "a"), Worker("w-b1", "b"),
                                           Worker("w-b2", "b"), Worker("w-b3", "b")};
  std::vector<RankPlacement> placement = PlaceRanks(Job("job-000001", 1, 4, "cpu", 2), workers);
  ASSERT_EQ(placement.size(), 4u);
  std::vector<std::string> ids;
  for (const RankPlacement& p : placement) ids.push_back(p.worker_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"w-a1", "w-a2", "w-b1", "w-b2"}));
  // Ring attention alone fills the fullest host first, as before: ranks 2 and 3 split.
  placement = PlaceRanks(Job("job-000002", 1, 4), workers);
  ids.clear();
  for (const RankPlacement& p : placement) ids.push_back(p.worker_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"w-a1", "w-a2", "w-a3", "w-b1"}));
}

TEST(PlaceRanksTest, DeterministicWhateverTheInputOrder) {
  std::vector<WorkerInfo> workers = {Worker("w-b2", "b"), Worker("w-a2", "a"), Worker("w-c1", "c"),
                                     Worker("w-a1", "a"), Worker("w-b1", "b"), Worker("w-c2", "c")};
  std::vector<RankPlacement> first = PlaceRanks(Job("job-000001", 2, 2), workers);
  std::reverse(workers.begin(), workers.end());
  std::vector<RankPlacement> second = PlaceRanks(Job("job-000001", 2, 2), workers);
  ASSERT_EQ(first.size(), 4u);
  ASSERT_EQ(second.size(), 4u);
  // Ties on free count break by host_label, then worker_id: groups on a and b.
  std::vector<std::string> expected = {"w-a1", "w-a2", "w-b1", "w-b2"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(first[i].worker_id, expected[i]);
    EXPECT_EQ(second[i].worker_id, expected[i]);
  }
}

TEST(PlaceRanksTest, EmptyForInvalidMeshOrTooFewWorkers) {
  std::vector<WorkerInfo> workers = {Worker("w1", "h"), Worker("w2", "h")};
  EXPECT_TRUE(PlaceRanks(Job("job-000001", 2, 2), workers).empty());
  EXPECT_TRUE(PlaceRanks(PendingJob{"job-000002", RunMesh{3, 1, 2}, "cpu"}, workers).empty());
  EXPECT_TRUE(PlaceRanks(PendingJob{"job-000003", RunMesh{0, 0, 0}, "cpu"}, workers).empty());
}

TEST(ScheduleTest, SecondJobWaitsThenStartsOnceWorkersFree) {
  std::vector<WorkerInfo> workers = {Worker("w1", "h"), Worker("w2", "h"), Worker("w3", "h"),
                                     Worker("w4", "h")};
  std::vector<PendingJob> queue = {Job("job-000001", 1, 2), Job("job-000002", 2, 2)};
  ScheduleDecision decision = Schedule(queue, workers);
  ASSERT_EQ(decision.start.size(), 1u);
  EXPECT_EQ(decision.start[0].first, "job-000001");
  ASSERT_EQ(decision.start[0].second.size(), 2u);
  ASSERT_EQ(decision.waiting.size(), 1u);
  EXPECT_EQ(decision.waiting.at("job-000002"), "waiting for 4 idle cpu workers, 2 free");

  // job-000001 holds w1, w2; once it finishes they are idle again and job-000002 starts.
  for (WorkerInfo& w : workers) {
    for (const RankPlacement& p : decision.start[0].second) {
      if (p.worker_id == w.worker_id) w.idle = false;
    }
  }
  decision = Schedule({queue[1]}, workers);
  EXPECT_TRUE(decision.start.empty());
  EXPECT_EQ(decision.waiting.at("job-000002"), "waiting for 4 idle cpu workers, 2 free");
  for (WorkerInfo& w : workers) w.idle = true;
  decision = Schedule({queue[1]}, workers);
  ASSERT_EQ(decision.start.size(), 1u);
  EXPECT_EQ(decision.start[0].first, "job-000002");
  EXPECT_EQ(decision.start[0].second.size(), 4u);
  EXPECT_TRUE(decision.waiting.empty());
}

TEST(ScheduleTest, TwoJobsRunSideBySideOnDisjointWorkers) {
  std::vector<WorkerInfo> workers = {Worker("w1", "a"), Worker("w2", "a"), Worker("w3", "b"),
                                     Worker("w4", "b")};
  ScheduleDecision decision = Schedule({Job("job-000001", 1, 2), Job("job-000002", 2, 1)}, workers);
  ASSERT_EQ(decision.start.size(), 2u);
  EXPECT_TRUE(decision.waiting.empty());
  std::set<std::string> used;
  for (const auto& [job_id, placement] : decision.start) {
    EXPECT_EQ(placement.size(), 2u) << job_id;
    for (const RankPlacement& p : placement) used.insert(p.worker_id);
  }
  EXPECT_EQ(used.size(), 4u);
}

TEST(ScheduleTest, HeadOfLineBlocksSameKindOnly) {
  // 3 idle cpu workers, 2 cuda. job-000001 (4 cpu) cannot start, so the small cpu job behind it
  // waits too instead of overtaking; the cuda job is not held up.
  std::vector<WorkerInfo> workers = {
      Worker("c1", "a"),         Worker("c2", "a"),
      Worker("c3", "b"),         Worker("g1", "g", "cuda"),
      Worker("g2", "g", "cuda"), Worker("c4", "b", "cpu", /*idle=*/false)};
  std::vector<PendingJob> queue = {Job("job-000001", 2, 2), Job("job-000002", 1, 1),
                                   Job("job-000003", 1, 2, "cuda"),
                                   Job("job-000004", 1, 1, "cuda")};
  ScheduleDecision decision = Schedule(queue, workers);
  ASSERT_EQ(decision.start.size(), 1u);
  EXPECT_EQ(decision.start[0].first, "job-000003");
  EXPECT_EQ(decision.waiting.at("job-000001"), "waiting for 4 idle cpu workers, 3 free");
  EXPECT_EQ(decision.waiting.at("job-000002"), "waiting behind job-000001 (FIFO) for cpu workers");
  // job-000004 is the first cuda job that cannot start; nothing cuda is behind it.
  EXPECT_EQ(decision.waiting.at("job-000004"), "waiting for 1 idle cuda worker, 0 free");
  EXPECT_EQ(decision.waiting.size(), 3u);
}

TEST(ScheduleTest, InvalidMeshWaitsWithoutBlocking) {
  std::vector<WorkerInfo> workers = {Worker("w1", "h"), Worker("w2", "h")};
  ScheduleDecision decision = Schedule(
      {PendingJob{"job-000001", RunMesh{3, 1, 2}, "cpu"}, Job("job-000002", 1, 2)}, workers);
  ASSERT_EQ(decision.start.size(), 1u);
  EXPECT_EQ(decision.start[0].first, "job-000002");
  EXPECT_THAT(decision.waiting.at("job-000001"), HasSubstr("invalid mesh"));
}

TEST(CheckCanEverRunTest, Messages) {
  std::vector<WorkerInfo> workers = {
      Worker("c1", "a"),         Worker("c2", "a"),
      Worker("c3", "a"),         Worker("c4", "a", "cpu", /*idle=*/false),
      Worker("g1", "g", "cuda"), Worker("g2", "g", "cuda", false)};
  EXPECT_TRUE(CheckCanEverRun(Job("job-000001", 2, 2), workers).ok());  // busy workers count
  EXPECT_TRUE(CheckCanEverRun(Job("job-000001", 1, 2, "cuda"), workers).ok());

  absl::Status status = CheckCanEverRun(Job("job-000002", 4, 2, "cuda"), workers);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("job needs 8 cuda workers but the pool has 2 (registered: 4 cpu, 2 cuda)"));

  status = CheckCanEverRun(Job("job-000003", 1, 1, "cuda"), {});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("job needs 1 cuda worker but the pool has 0 (registered: none)"));

  // The caller expects up to 8 cuda workers: the job may run once they register.
  EXPECT_TRUE(CheckCanEverRun(Job("job-000002", 4, 2, "cuda"), workers, 8).ok());
  status = CheckCanEverRun(Job("job-000004", 4, 4, "cuda"), workers, 8);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("expects at most 8"));

  status = CheckCanEverRun(PendingJob{"job-000005", RunMesh{3, 1, 2}, "cpu"}, workers);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringtrain
