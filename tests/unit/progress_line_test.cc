// ringtrain-tokenize's progress line (tools/tokenize/progress_line.h), formatted for given states.
#include "tools/tokenize/progress_line.h"

#include "gtest/gtest.h"

namespace ringtrain {
namespace {

TEST(ProgressLineTest, FormatsBarBytesFileAndRate) {
  constexpr int64_t kMiB = 1024 * 1024;
  EXPECT_EQ(ProgressLine::Format(0, 10 * kMiB, 1, 2, 0),
            "[....................]   0.0%  0.0/10.0 MiB  file 1/2  0.00 M tokens/s");
  EXPECT_EQ(ProgressLine::Format(5 * kMiB, 10 * kMiB, 2, 2, 1.5e6),
            "[##########..........]  50.0%  5.0/10.0 MiB  file 2/2  1.50 M tokens/s");
  // Never past full, and an empty input is done.
  EXPECT_EQ(ProgressLine::Format(11 * kMiB, 10 * kMiB, 2, 2, 0).substr(0, 30),
            "[####################] 100.0% ");
  EXPECT_EQ(ProgressLine::Format(0, 0, 1, 1, 0).substr(0, 30), "[####################] 100.0% ");
}

}  // namespace
}  // namespace ringtrain
