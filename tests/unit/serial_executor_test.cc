#include "coordinator/serial_executor.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace ringtrain {
namespace {

TEST(SerialExecutorTest, RunsTasksInOrderOnItsOwnThread) {
  absl::Mutex mu;
  std::vector<int> ran;
  std::thread::id thread;
  absl::Notification last;
  {
    SerialExecutor executor;
    for (int i = 0; i < 100; ++i) {
      executor.Schedule([&, i] {
        absl::MutexLock lock(&mu);
        ran.push_back(i);
        thread = std::this_thread::get_id();
        if (i == 99) last.Notify();
      });
    }
    last.WaitForNotification();
  }
  absl::MutexLock lock(&mu);
  ASSERT_EQ(ran.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ran[i], i);
  EXPECT_NE(thread, std::this_thread::get_id());
}

TEST(SerialExecutorTest, DestructionRunsWhatIsScheduledAndWhatThatSchedules) {
  absl::Notification release;
  int ran = 0;  // written by the executor's thread only, read after the join
  {
    SerialExecutor executor;
    executor.Schedule([&] { release.WaitForNotification(); });
    for (int i = 0; i < 10; ++i) executor.Schedule([&] { ++ran; });
    executor.Schedule([&] { executor.Schedule([&] { ++ran; }); });
    release.Notify();
  }
  EXPECT_EQ(ran, 11);
}

}  // namespace
}  // namespace ringtrain
