#include "coordinator/serial_executor.h"

#include <utility>

namespace ringtrain {

SerialExecutor::SerialExecutor() : thread_([this] { Run(); }) {}

SerialExecutor::~SerialExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void SerialExecutor::Schedule(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

bool SerialExecutor::HasWorkOrStops() const { return stopping_ || !tasks_.empty(); }

void SerialExecutor::Run() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &SerialExecutor::HasWorkOrStops));
      if (tasks_.empty()) return;  // stopping, and nothing is left to run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace ringtrain
