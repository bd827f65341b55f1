// The EventHub as coded: Publish hands each event, synchronously and under the hub's lock, to
// every sink subscribed to that job and to no other; each sink sees events in publish order; a
// sink unsubscribed gets nothing more once Unsubscribe has returned, even with publishers running.
// The hub itself never buffers or drops: a slow reader is its sink's business (WatchReactor keeps
// a bounded buffer and catches up from the store), so every Publish reaches every sink.
#include "coordinator/event_hub.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace ringtrain {
namespace {

v1::JobEvent Step(const std::string& job_id, int64_t step) {
  v1::JobEvent event;
  event.mutable_step()->set_job_id(job_id);
  event.mutable_step()->set_step(step);
  return event;
}

class Recorder : public JobEventSink {
 public:
  void OnJobEvent(const v1::JobEvent& event) override {
    steps.push_back(event.step().step());
    jobs.push_back(event.step().job_id());
    count.fetch_add(1);
  }
  std::vector<int64_t> steps;  // read only when no Publish can run
  std::vector<std::string> jobs;
  std::atomic<int> count{0};
};

TEST(EventHubTest, PublishWithoutWatchersReachesNobody) {
  EventHub hub;
  EXPECT_EQ(hub.Publish("job-000001", Step("job-000001", 1)), 0);
  EXPECT_EQ(hub.EventsDelivered(), 0);
  EXPECT_EQ(hub.WatcherCount(), 0);
}

TEST(EventHubTest, FansOutToEverySinkOfTheJobOnlyInPublishOrder) {
  EventHub hub;
  Recorder a1, a2, a3, b;
  hub.Subscribe("job-A", &a1);
  hub.Subscribe("job-A", &a2);
  hub.Subscribe("job-A", &a3);
  hub.Subscribe("job-B", &b);
  EXPECT_EQ(hub.WatcherCount(), 4);

  for (int64_t step = 1; step <= 3; ++step) EXPECT_EQ(hub.Publish("job-A", Step("job-A", step)), 3);
  EXPECT_EQ(hub.Publish("job-B", Step("job-B", 7)), 1);

  for (const Recorder* sink : {&a1, &a2, &a3}) {
    EXPECT_EQ(sink->steps, (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(sink->jobs, (std::vector<std::string>(3, "job-A")));
  }
  EXPECT_EQ(b.steps, (std::vector<int64_t>{7}));
  EXPECT_EQ(hub.EventsDelivered(), 3 * 3 + 1);  // one per sink reached
}

TEST(EventHubTest, UnsubscribedSinkGetsNothingMoreAndTheOthersCarryOn) {
  EventHub hub;
  Recorder stays, leaves;
  hub.Subscribe("job-A", &stays);
  hub.Subscribe("job-A", &leaves);
  hub.Publish("job-A", Step("job-A", 1));
  hub.Unsubscribe("job-A", &leaves);
  EXPECT_EQ(hub.WatcherCount(), 1);
  EXPECT_EQ(hub.Publish("job-A", Step("job-A", 2)), 1);
  EXPECT_EQ(stays.steps, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(leaves.steps, (std::vector<int64_t>{1}));

  hub.Unsubscribe("job-A", &stays);
  EXPECT_EQ(hub.WatcherCount(), 0);
  EXPECT_EQ(hub.Publish("job-A", Step("job-A", 3)), 0);
  EXPECT_EQ(hub.EventsDelivered(), 2 + 1);
}

TEST(EventHubTest, UnsubscribingWhatIsNotSubscribedChangesNothing) {
  EventHub hub;
  Recorder sink, stranger;
  hub.Subscribe("job-A", &sink);
  hub.Unsubscribe("job-B", &sink);      // a job it does not watch
  hub.Unsubscribe("job-A", &stranger);  // a sink never subscribed
  hub.Unsubscribe("job-C", &stranger);  // a job nobody watches
  EXPECT_EQ(hub.WatcherCount(), 1);
  EXPECT_EQ(hub.Publish("job-A", Step("job-A", 1)), 1);
  EXPECT_EQ(sink.steps, (std::vector<int64_t>{1}));
}

TEST(EventHubTest, ASinkIsSubscribedOncePerJobButMayWatchSeveralJobs) {
  EventHub hub;
  Recorder sink;
  hub.Subscribe("job-A", &sink);
  hub.Subscribe("job-A", &sink);  // a set: the second subscription is the same one
  hub.Subscribe("job-B", &sink);
  EXPECT_EQ(hub.WatcherCount(), 2);
  EXPECT_EQ(hub.Publish("job-A", Step("job-A", 1)), 1);
  EXPECT_EQ(hub.Publish("job-B", Step("job-B", 2)), 1);
  EXPECT_EQ(sink.steps, (std::vector<int64_t>{1, 2}));
  hub.Unsubscribe("job-A", &sink);  // one Unsubscribe undoes both Subscribes of job-A
  EXPECT_EQ(hub.Publish("job-A", Step("job-A", 3)), 0);
  EXPECT_EQ(hub.Publish("job-B", Step("job-B", 4)), 1);
  EXPECT_EQ(sink.steps, (std::vector<int64_t>{1, 2, 4}));
}

TEST(EventHubTest, ConcurrentPublishersReachEverySinkInEachPublishersOrder) {
  constexpr int kPublishers = 4;
  constexpr int kEventsEach = 2000;
  EventHub hub;
  Recorder sinks[3];
  for (Recorder& sink : sinks) hub.Subscribe("job-A", &sink);
  std::vector<std::thread> publishers;
  for (int p = 0; p < kPublishers; ++p) {
    publishers.emplace_back([&hub, p] {
      // Step numbers p, p + kPublishers, …: each publisher's own sequence rises.
      for (int i = 0; i < kEventsEach; ++i) {
        hub.Publish("job-A", Step("job-A", p + i * kPublishers));
      }
    });
  }
  for (std::thread& t : publishers) t.join();
  for (const Recorder& sink : sinks) {
    ASSERT_EQ(sink.steps.size(), static_cast<size_t>(kPublishers * kEventsEach));
    std::vector<int64_t> last(kPublishers, -1);
    for (int64_t step : sink.steps) {
      const int p = static_cast<int>(step % kPublishers);
      EXPECT_GT(step, last[p]);
      last[p] = step;
    }
  }
  // Every sink saw the same interleaving: the hub delivers each event to all before the next.
  EXPECT_EQ(sinks[0].steps, sinks[1].steps);
  EXPECT_EQ(sinks[0].steps, sinks[2].steps);
  EXPECT_EQ(hub.EventsDelivered(), int64_t{3} * kPublishers * kEventsEach);
}

TEST(EventHubTest, NothingReachesASinkAfterUnsubscribeReturnsWhilePublishing) {
  EventHub hub;
  Recorder sink;
  hub.Subscribe("job-A", &sink);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> published{0};
  std::thread publisher([&] {
    for (int64_t step = 1; !stop.load(); ++step) {
      hub.Publish("job-A", Step("job-A", step));
      published.store(step);
    }
  });
  while (sink.count.load() < 100) std::this_thread::yield();
  hub.Unsubscribe("job-A", &sink);
  const int seen = sink.count.load();
  const int64_t published_at_unsubscribe = published.load();
  while (published.load() < published_at_unsubscribe + 1000) std::this_thread::yield();
  stop.store(true);
  publisher.join();
  EXPECT_EQ(sink.count.load(), seen);
  EXPECT_EQ(hub.WatcherCount(), 0);
}

}  // namespace
}  // namespace ringtrain
