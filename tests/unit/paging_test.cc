// ListJobs/ListWorkers paging (coordinator/paging.h): page sizes, tokens, and the byte budget.
#include "coordinator/paging.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {
namespace {

TEST(PagingTest, PageSizes) {
  EXPECT_EQ(*PageSize(0), kDefaultPageSize);
  EXPECT_EQ(*PageSize(7), 7);
  EXPECT_EQ(*PageSize(1 << 30), kMaxPageSize);
  EXPECT_EQ(PageSize(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PagingTest, TokensRoundTripAndBelongToOneList) {
  EXPECT_EQ(*PageTokenId("jobs", ""), "");
  EXPECT_EQ(*PageTokenId("jobs", NextPageToken("jobs", "job-000042")), "job-000042");
  EXPECT_EQ(PageTokenId("workers", NextPageToken("jobs", "job-000042")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PageTokenId("jobs", "jobs-after:").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PageTokenId("jobs", "garbage").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PagingTest, PageLengthKeepsToTheByteBudgetButTakesOne) {
  std::vector<v1::Job> jobs(10);
  for (v1::Job& job : jobs) job.set_config_toml(std::string(300 * 1024, 'x'));
  EXPECT_EQ(PageLength(jobs, 100), 3u);  // 3 × 300 KiB fit in 1 MiB, a fourth does not
  EXPECT_EQ(PageLength(jobs, 2), 2u);
  std::vector<v1::Job> huge(2);
  huge[0].set_config_toml(std::string(2 * 1024 * 1024, 'x'));
  EXPECT_EQ(PageLength(huge, 100), 1u);
  EXPECT_EQ(PageLength(std::vector<v1::Job>(), 100), 0u);
  EXPECT_EQ(PageLength(std::vector<v1::Job>(5), 100), 5u);
}

}  // namespace
}  // namespace ringtrain
