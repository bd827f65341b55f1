// Outbox (worker/agent/outbox.h): numbering, order, kept until acknowledged and written again
// after a broken session, the bound on RankReports, epochs, and several producers against one
// consumer.
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

std::string Describe(const v1::AgentMessage& m) {
  if (m.has_rank_started()) return "started";
  if (m.has_rank_report()) return "report " + m.rank_report().record_json();
  return absl::StrCat("exit ", m.rank_exit().exit_status());
}

// "started", "report R", "exit S" for each message, writing and acknowledging it, until the
// outbox is empty.
std::vector<std::string> Drain(Outbox& outbox) {
  std::vector<std::string> out;
  while (std::optional<v1::AgentMessage> m = outbox.NextToWrite()) {
    out.push_back(Describe(*m));
    outbox.MarkWritten(m->seq());
    outbox.Acknowledge(m->seq());
  }
  return out;
}

TEST(OutboxTest, NumbersMessagesAndKeepsThemUntilAcknowledged) {
  Outbox outbox(10);
  EXPECT_TRUE(outbox.empty());
  EXPECT_FALSE(outbox.NextToWrite().has_value());
  EXPECT_TRUE(outbox.Push(Started()));
  EXPECT_TRUE(outbox.Push(Report("1")));
  EXPECT_TRUE(outbox.Push(Exit(0)));
  EXPECT_EQ(outbox.size(), 3u);
  // Reading does not consume: until MarkWritten, the same message is next.
  EXPECT_EQ(outbox.NextToWrite()->seq(), 1u);
  EXPECT_EQ(outbox.NextToWrite()->seq(), 1u);
  outbox.MarkWritten(1);
  outbox.MarkWritten(2);
  EXPECT_EQ(outbox.NextToWrite()->seq(), 3u);
  outbox.MarkWritten(3);
  EXPECT_FALSE(outbox.HasUnwritten());
  // Written is not delivered: every message stays until its Ack.
  EXPECT_EQ(outbox.size(), 3u);
  EXPECT_EQ(outbox.Acknowledge(1), 1u);
  EXPECT_EQ(outbox.size(), 2u);
  // The stream broke before the coordinator acknowledged the rest: the next session writes
  // them again, in order, with the same numbers.
  outbox.Rewind();
  ASSERT_TRUE(outbox.HasUnwritten());
  EXPECT_EQ(outbox.NextToWrite()->seq(), 2u);
  EXPECT_EQ(Describe(*outbox.NextToWrite()), "report 1");
  outbox.MarkWritten(2);
  EXPECT_EQ(outbox.NextToWrite()->seq(), 3u);
  // Acks are cumulative, and an old one removes nothing more.
  EXPECT_EQ(outbox.Acknowledge(3), 2u);
  EXPECT_EQ(outbox.Acknowledge(2), 0u);
  EXPECT_TRUE(outbox.empty());
  EXPECT_FALSE(outbox.NextToWrite().has_value());
  // Numbers go on after the queue emptied.
  EXPECT_TRUE(outbox.Push(Report("2")));
  EXPECT_EQ(outbox.NextToWrite()->seq(), 4u);
}

// The writer writes a message and then marks it written; the reader may take its Ack in between.
// The cursor is a seq, so the Ack removing the message cannot make it skip the next one.
TEST(OutboxTest, AnAckBeforeTheWriterMarksItsMessageSkipsNothing) {
  Outbox outbox(10);
  for (int i = 0; i < 3; ++i) outbox.Push(Report(absl::StrCat(i)));
  const uint64_t written = outbox.NextToWrite()->seq();
  EXPECT_EQ(outbox.Acknowledge(written), 1u);  // the Ack overtakes MarkWritten
  outbox.MarkWritten(written);
  ASSERT_TRUE(outbox.NextToWrite().has_value());
  EXPECT_EQ(outbox.NextToWrite()->seq(), 2u) << "seq 2 was never written";
  outbox.MarkWritten(2);
  EXPECT_EQ(outbox.Acknowledge(3), 2u);  // cumulative, past what was written
  EXPECT_FALSE(outbox.HasUnwritten());
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
  // Written but unacknowledged messages still take room.
  outbox.MarkWritten(5);  // everything queued (seqs 1, 2, 3 and the exit's 4) was written
  EXPECT_FALSE(outbox.Push(Report("x")));
  outbox.Rewind();
  EXPECT_EQ(Drain(outbox), (std::vector<std::string>{"started", "report 1", "report 2", "exit 1"}));
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
  EXPECT_TRUE(outbox.Push(Exit(2)));        // the current epoch
  EXPECT_EQ(outbox.dropped_reports(), 0u);  // epoch drops are not counted as "full"
  EXPECT_EQ(Drain(outbox), (std::vector<std::string>{"report new", "exit 2"}));
  EXPECT_EQ(outbox.DropAll(), 0u);
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
    const std::optional<v1::AgentMessage> m = outbox.NextToWrite();
    if (!m) {
      std::this_thread::yield();
      continue;
    }
    const std::string& record = m->rank_report().record_json();
    const int p = std::stoi(record.substr(0, record.find(':')));
    ASSERT_EQ(record, absl::StrCat(p, ":", next[p])) << "out of order";
    ++next[p];
    ASSERT_EQ(m->seq(), static_cast<uint64_t>(received + 1)) << "numbered in queue order";
    ++received;
    outbox.MarkWritten(m->seq());
    outbox.Acknowledge(m->seq());
  }
  for (std::thread& t : producers) t.join();
  EXPECT_TRUE(outbox.empty());
}

}  // namespace
}  // namespace ringtrain
