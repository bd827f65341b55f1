// Sizes as people write them (ringctl plan's --device-memory).
#include "common/byte_size.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

TEST(ParseByteSizeTest, UnitsAndPlainBytes) {
  EXPECT_EQ(*ParseByteSize("80GiB"), int64_t{80} << 30);
  EXPECT_EQ(*ParseByteSize("85899345920"), int64_t{80} << 30);
  EXPECT_EQ(*ParseByteSize("80GB"), int64_t{80'000'000'000});
  EXPECT_EQ(*ParseByteSize("141 gb"), int64_t{141'000'000'000});
  EXPECT_EQ(*ParseByteSize("1.5TiB"), int64_t{3} << 39);
  EXPECT_EQ(*ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("4096B"), 4096);
}

TEST(ParseByteSizeTest, RejectsWhatIsNotASize) {
  for (const char* bad : {"", "GiB", "80GiBs", "eighty", "-1GiB", "0", "80 XB", "1e30", "9EiB"}) {
    const absl::StatusOr<int64_t> size = ParseByteSize(bad);
    ASSERT_FALSE(size.ok()) << bad;
    EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(size.status().message()),
                ::testing::HasSubstr(std::string("'") + bad + "' is not a size"));
  }
}

}  // namespace
}  // namespace ringtrain
