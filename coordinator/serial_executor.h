// Work taken off gRPC's reaction threads, which must never block (route_guide's callback server):
// a WatchJob stream's reads of the job store run on an executor, and the stream goes on when the
// read is done.
#ifndef RINGTRAIN_COORDINATOR_SERIAL_EXECUTOR_H_
#define RINGTRAIN_COORDINATOR_SERIAL_EXECUTOR_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ringtrain {

// Where a task runs. Thread-safe.
class Executor {
 public:
  virtual ~Executor() = default;
  // Runs `task` later, on another thread: never inside this call, so a caller may hold its own
  // lock, which the task may then take.
  virtual void Schedule(std::function<void()> task) = 0;
};

// Runs tasks one at a time, in the order scheduled, on one thread of its own. The job store runs
// one call at a time anyway (job_store.h), so one thread loses nothing over a pool. The destructor
// runs every task already scheduled (and any those schedule), then joins the thread: what the tasks
// use must outlive the executor.
class SerialExecutor final : public Executor {
 public:
  SerialExecutor();
  ~SerialExecutor() override;
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  void Schedule(std::function<void()> task) override;

 private:
  void Run();
  bool HasWorkOrStops() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_SERIAL_EXECUTOR_H_
