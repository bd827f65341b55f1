// Outbox (worker/agent/outbox.h): order, the bound on RankReports, epochs, re-sent records in
// front, and several producers against one consumer.
#include "worker/agent/outbox.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

v1::AgentMessage Report(const std::string& record) {
  v1::AgentMessage m;
  m.mutable_rank_report()->set_job_id("job-1");
  m.mutable_rank_report()->set_record_json(record);
  return m;
}

v1::AgentMessage Started() {
  v1::AgentMessage m;
  m.mutable_rank_started()->set_job_id("job-1");
  return m;
}

v1::AgentMessage Exit(int status) {
  v1::AgentMessage m;
  m.mutable_rank_exit()->set_job_id("job-1");
  m.mutable_rank_exit()->set_exit_status(status);
  return m;
}

// "started", "report R", "exit S" for each message, popping the outbox empty.
std::vector<std::string> Drain(Outbox& outbox) {
  std::vector<std::string> out;
  while (std::optional<v1::AgentMessage> m = outbox.Front()) {
    if (m->has_rank_started()) out.push_back("started");
    if (m->has_rank_report()) out.push_back("report " + m->rank_report().record_json());
    if (m->has_rank_exit()) out.push_back(absl::StrCat("exit ", m->rank_exit().exit_status()));
    outbox.PopFront();
  }
  return out;
}

TEST(OutboxTest, OldestFirstAndFrontStaysUntilPopped) {
  Outbox outbox(10);
  EXPECT_TRUE(outbox.empty());
  EXPECT_FALSE(outbox.Front().has_value());
  outbox.PopFront();  // no-op when empty
  EXPECT_TRUE(outbox.Push(Started()));
  EXPECT_TRUE(outbox.Push(Report("1")));
  EXPECT_TRUE(outbox.Push(Exit(0)));
  EXPECT_EQ(outbox.size(), 3u);
  // Reading the front does not consume it: a failed Write leaves it for the next session.
  EXPECT_TRUE(outbox.Front()->has_rank_started());
  EXPECT_TRUE(outbox.Front()->has_rank_started());
  EXPECT_EQ(Drain(outbox), (std::vector<std::string>{"started", "report 1", "exit 0"}));
}

TEST(OutboxTest, WhenFullOnlyRankReportsAreDropped) {
  Outbox outbox(3);
  EXPECT_TRUE(outbox.Push(Started()));
  EXPECT_TRUE(outbox.Push(Report("1")));
  EXPECT_TRUE(outbox.Push(Report("2")));
  EXPECT_FALSE(outbox.Push(Report("3")));  // three messages queued: full
  EXPECT_FALSE(outbox.Push(Report("4")));
  EXPECT_EQ(outbox.dropped_reports(), 2u);
  EXPECT_TRUE(outbox.Push(Exit(1)));  // never dropped for room
  EXPECT_TRUE(outbox.HasRankExit());
  EXPECT_EQ(outbox.size(), 4u);
  EXPECT_EQ(Drain(outbox),
            (std::vector<std::string>{"started", "report 1", "report 2", "exit 1"}));
  EXPECT_TRUE(outbox.Push(Report("5")));  // room again
  EXPECT_FALSE(outbox.HasRankExit());
}

TEST(OutboxTest, DropAllStartsANewEpochThatRejectsTheOldOnesMessages) {
  Outbox outbox(10);
  const uint64_t first = outbox.epoch();
  EXPECT_TRUE(outbox.Push(first, Started()));
  EXPECT_TRUE(outbox.Push(first, Report("1")));
  EXPECT_EQ(outbox.DropAll(), 2u);
  EXPECT_TRUE(outbox.empty());
  EXPECT_NE(outbox.epoch(), first);
  EXPECT_FALSE(outbox.Push(first, Exit(0)));  // the abandoned rank ends later: dropped
  EXPECT_TRUE(outbox.empty());
  EXPECT_TRUE(outbox.Push(outbox.epoch(), Report("new")));
  EXPECT_TRUE(outbox.Push(Exit(2)));  // the current epoch
  EXPECT_EQ(outbox.dropped_reports(), 0u);  // epoch drops are not counted as "full"
  EXPECT_EQ(Drain(outbox), (std::vector<std::string>{"report new", "exit 2"}));
  EXPECT_EQ(outbox.DropAll(), 0u);
}

TEST(OutboxTest, PushFrontGoesAheadInOrderWhateverTheBound) {
  Outbox outbox(2);
  outbox.Push(Report("3"));
  outbox.Push(Exit(0));
  outbox.PushFront({Report("1"), Report("2")});
  outbox.PushFront({});
  EXPECT_EQ(outbox.size(), 4u);
  EXPECT_EQ(Drain(outbox),
            (std::vector<std::string>{"report 1", "report 2", "report 3", "exit 0"}));
}

TEST(OutboxTest, ProducersKeepTheirOrderAgainstOneConsumer) {
  constexpr int kProducers = 4, kEach = 2000;
  Outbox outbox(kProducers * kEach);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&outbox, p] {
      for (int i = 0; i < kEach; ++i) outbox.Push(Report(absl::StrCat(p, ":", i)));
    });
  }
  std::vector<int> next(kProducers, 0);
  int received = 0;
  while (received < kProducers * kEach) {
    const std::optional<v1::AgentMessage> m = outbox.Front();
    if (!m) {
      std::this_thread::yield();
      continue;
    }
    const std::string& record = m->rank_report().record_json();
    const int p = std::stoi(record.substr(0, record.find(':')));
    ASSERT_EQ(record, absl::StrCat(p, ":", next[p])) << "out of order";
    ++next[p];
    ++received;
    outbox.PopFront();
  }
  for (std::thread& t : producers) t.join();
  EXPECT_TRUE(outbox.empty());
}

}  // namespace
}  // namespace ringtrain
