// WatchReactor over a real (in-memory) JobStore and EventHub, served on loopback: the replay's
// order across pages, following live events after it, and that the store is read by the loader
// executor, never inside a reaction: with the loader holding a read, the stream still answers a
// cancel, and the reactor outlives OnDone until the held read ends.
#include "coordinator/watch_reactor.h"

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc/client_util.h"
#include "coordinator/proto_convert.h"
#include "ringtrain/v1/job_service.grpc.pb.h"

namespace ringtrain {
namespace {

using namespace std::chrono_literals;

// Holds every task until the test runs it, on the test's thread: a store read that takes as long
// as the test wants.
class HeldExecutor : public Executor {
 public:
  void Schedule(std::function<void()> task) override {
    absl::MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }
  // Waits until a task is held; false when none comes within 30 s (a stream that stalled).
  bool AwaitTask() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(this, &HeldExecutor::HasTask), absl::Seconds(30));
  }
  int Held() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(tasks_.size());
  }
  void RunOne() {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      ASSERT_FALSE(tasks_.empty());
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
  void RunAll() {
    while (Held() > 0) RunOne();
  }

 private:
  bool HasTask() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !tasks_.empty(); }
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
};

class CountingRpcs : public RpcCounter {
 public:
  void CountRpc(const std::string& method, absl::StatusCode code) override {
    absl::MutexLock lock(&mu_);
    ++counts_[absl::StrCat(method, " ", absl::StatusCodeToString(code))];
  }
  int Count(const std::string& key) {
    absl::MutexLock lock(&mu_);
    return counts_[key];
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
};

// A JobService whose only call is WatchJob, served by WatchReactor.
class WatchService : public v1::JobService::CallbackService {
 public:
  WatchService(JobStore* store, EventHub* hub, RpcCounter* rpcs, Executor* loader)
      : store_(store), hub_(hub), rpcs_(rpcs), loader_(loader) {}
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext*,
                                                   const v1::WatchJobRequest* request) override {
    return new WatchReactor(store_, hub_, rpcs_, loader_, request->job_id(), request->from_step());
  }

 private:
  JobStore* const store_;
  EventHub* const hub_;
  RpcCounter* const rpcs_;
  Executor* const loader_;
};

std::string Describe(const v1::JobEvent& event) {
  if (event.has_step()) return absl::StrCat("step ", event.step().step());
  return absl::StrCat("state ", v1::JobState_Name(event.state_change().to_state()));
}

std::vector<std::string> StepsFrom(int64_t first, int64_t last) {
  std::vector<std::string> out;
  for (int64_t s = first; s <= last; ++s) out.push_back(absl::StrCat("step ", s));
  return out;
}

std::vector<std::string> Join(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<std::string> kStatesToRunning = {
    "state JOB_STATE_QUEUED", "state JOB_STATE_ASSIGNED", "state JOB_STATE_RUNNING"};

class WatchReactorTest : public ::testing::Test {
 protected:
  // Serves WatchJob with `loader` reading the pages (held_ when null).
  void Serve(Executor* loader = nullptr) {
    auto store = JobStore::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    service_ = std::make_unique<WatchService>(store_.get(), &hub_, &rpcs_,
                                              loader != nullptr ? loader : &held_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::JobService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_) server_->Shutdown(DeadlineIn(2000ms));
    held_.RunAll();   // a reactor whose read is held lives until the read ends
    serial_.reset();  // runs what is scheduled, while the store lives
  }

  // A running job with steps 1..steps stored.
  std::string RunningJob(int64_t steps) {
    JobRecord job;
    job.name = "watched";
    job.degrees.world = 1;
    job.total_steps = steps + 100;
    absl::StatusOr<JobRecord> created = store_->CreateJob(job);
    EXPECT_TRUE(created.ok()) << created.status();
    const std::string id = created->job_id;
    EXPECT_TRUE(store_->TransitionJob(id, JobState::kAssigned, "placed").ok());
    EXPECT_TRUE(store_->TransitionJob(id, JobState::kRunning, "started").ok());
    for (int64_t s = 1; s <= steps; ++s) AddStep(id, s, /*publish=*/false);
    return id;
  }

  // Stores step `step` and, when `publish`, hands it to the hub as the Cluster does.
  void AddStep(const std::string& job_id, int64_t step, bool publish) {
    StepEvent event{job_id, step, 10.0 / step, 1.0, 3e-4, 100.0, 0.5, "{}"};
    ASSERT_TRUE(store_->AppendStepEvent(event).ok());
    if (publish) hub_.Publish(job_id, ToProtoEvent(event));
  }

  void Succeed(const std::string& job_id) {
    absl::StatusOr<StateChange> change =
        store_->TransitionJob(job_id, JobState::kSucceeded, "done");
    ASSERT_TRUE(change.ok()) << change.status();
    hub_.Publish(job_id, ToProtoEvent(*change));
  }

  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> Watch(grpc::ClientContext* context,
                                                          const std::string& job_id,
                                                          int64_t from_step = 0) {
    context->set_deadline(DeadlineIn(60000ms));
    v1::WatchJobRequest request;
    request.set_job_id(job_id);
    request.set_from_step(from_step);
    return stub_->WatchJob(context, request);
  }

  // Reads `n` events (fewer when the stream ends first).
  static std::vector<std::string> Read(grpc::ClientReader<v1::JobEvent>* reader, size_t n) {
    std::vector<std::string> out;
    v1::JobEvent event;
    while (out.size() < n && reader->Read(&event)) out.push_back(Describe(event));
    return out;
  }

  // Waits until no watcher is subscribed (OnDone has run for every stream).
  bool AwaitNoWatchers() {
    for (int i = 0; i < 3000 && hub_.WatcherCount() > 0; ++i) std::this_thread::sleep_for(10ms);
    return hub_.WatcherCount() == 0;
  }

  EventHub hub_;
  CountingRpcs rpcs_;
  HeldExecutor held_;
  std::unique_ptr<SerialExecutor> serial_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<WatchService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

TEST_F(WatchReactorTest, ReplaysTheHistoryInOrderAcrossPages) {
  serial_ = std::make_unique<SerialExecutor>();
  Serve(serial_.get());
  const int64_t steps = 2 * WatchReactor::kReplayPageSteps + 88;
  const std::string id = RunningJob(steps);
  Succeed(id);

  grpc::ClientContext all;
  auto reader = Watch(&all, id);
  EXPECT_EQ(Read(reader.get(), 10000),
            Join(Join(kStatesToRunning, StepsFrom(1, steps)), {"state JOB_STATE_SUCCEEDED"}));
  EXPECT_TRUE(reader->Finish().ok());

  grpc::ClientContext later;
  reader = Watch(&later, id, 300);
  EXPECT_EQ(Read(reader.get(), 10000),
            Join(Join(kStatesToRunning, StepsFrom(300, steps)), {"state JOB_STATE_SUCCEEDED"}));
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(WatchReactorTest, FollowsLiveEventsAfterTheReplay) {
  serial_ = std::make_unique<SerialExecutor>();
  Serve(serial_.get());
  const std::string id = RunningJob(2);
  grpc::ClientContext context;
  auto reader = Watch(&context, id);
  EXPECT_EQ(Read(reader.get(), 5), Join(kStatesToRunning, StepsFrom(1, 2)));
  AddStep(id, 3, /*publish=*/true);
  Succeed(id);
  EXPECT_EQ(Read(reader.get(), 10),
            (std::vector<std::string>{"step 3", "state JOB_STATE_SUCCEEDED"}));
  EXPECT_TRUE(reader->Finish().ok());
}

// Each page is read by a loader task, and nothing is written until it has run; an event published
// meanwhile is written once, in step order.
TEST_F(WatchReactorTest, PagesAreReadByTheLoaderAndLiveEventsMeanwhileAreSentOnce) {
  Serve();
  const int64_t page = WatchReactor::kReplayPageSteps;
  const std::string id = RunningJob(page + 44);
  grpc::ClientContext context;
  auto reader = Watch(&context, id);

  ASSERT_TRUE(held_.AwaitTask());  // the first page: read by the loader, not by the reaction
  held_.RunOne();
  EXPECT_EQ(Read(reader.get(), 3 + page), Join(kStatesToRunning, StepsFrom(1, page)));

  ASSERT_TRUE(held_.AwaitTask());  // the second page, held while a step is published
  AddStep(id, page + 45, /*publish=*/true);
  held_.RunOne();
  EXPECT_EQ(Read(reader.get(), 45), StepsFrom(page + 1, page + 45));

  ASSERT_TRUE(held_.AwaitTask());  // the store has nothing newer: the stream follows live
  held_.RunOne();
  Succeed(id);
  EXPECT_EQ(Read(reader.get(), 10), std::vector<std::string>{"state JOB_STATE_SUCCEEDED"});
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(held_.Held(), 0);
}

// A slow store no longer holds the stream: with the first page's read held, the client's cancel is
// still answered (OnCancel finishes the stream) and OnDone runs; the reactor then lives until the
// held read ends, which deletes it.
TEST_F(WatchReactorTest, AHeldStoreReadDoesNotHoldTheStream) {
  Serve();
  const std::string id = RunningJob(3);
  grpc::ClientContext context;
  auto reader = Watch(&context, id);
  ASSERT_TRUE(held_.AwaitTask());
  EXPECT_EQ(rpcs_.Count("WatchJob CANCELLED"), 0);

  context.TryCancel();
  for (int i = 0; i < 3000 && rpcs_.Count("WatchJob CANCELLED") == 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(rpcs_.Count("WatchJob CANCELLED"), 1);  // finished while the read is still held
  EXPECT_TRUE(AwaitNoWatchers());                   // and OnDone has run
  EXPECT_EQ(held_.Held(), 1);
  held_.RunOne();  // the read ends after OnDone: it deletes the reactor, and writes nothing
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(held_.Held(), 0);
}

}  // namespace
}  // namespace ringtrain
