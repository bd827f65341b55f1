// The store stamp's pure rules and its file: the JSON round trip, what a stamp must hold, the
// atomic write, and which stores match their stamp (a stamp may lag, never lead).
#include "coordinator/store_stamp.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(StoreStampTest, FormatAndParseRoundTrip) {
  const StoreStamp stamp{43, 1700000000123};
  const std::string text = FormatStoreStamp(stamp);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_TRUE(Contains(text, "\"last_job_id\":\"job-000042\"")) << text;
  EXPECT_TRUE(Contains(text, "\"jobs\":42")) << text;
  EXPECT_TRUE(Contains(text, "2023-11-14 22:13:20 UTC")) << text;
  auto parsed = ParseStoreStamp(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->next_job_number, 43);
  EXPECT_EQ(parsed->written_unix_ms, 1700000000123);
  // A store that never held a job: no last id.
  EXPECT_TRUE(Contains(FormatStoreStamp({1, 0}), "\"last_job_id\":\"\""));
}

TEST(StoreStampTest, ParseSaysWhatIsWrong) {
  EXPECT_EQ(ParseStoreStamp("{\"next_job_number\": 3").status().message(), "it is not JSON");
  EXPECT_EQ(ParseStoreStamp("[3]").status().message(), "it is not a JSON object");
  for (const char* bad : {"{}", "{\"next_job_number\": 0, \"written_unix_ms\": 1}",
                          "{\"next_job_number\": \"3\", \"written_unix_ms\": 1}",
                          "{\"next_job_number\": 2.5, \"written_unix_ms\": 1}"}) {
    auto parsed = ParseStoreStamp(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(Contains(std::string(parsed.status().message()), "next_job_number")) << bad;
  }
  EXPECT_TRUE(Contains(std::string(ParseStoreStamp("{\"next_job_number\": 2}").status().message()),
                       "written_unix_ms"));
  EXPECT_TRUE(ParseStoreStamp("{\"next_job_number\": 2, \"written_unix_ms\": 5, \"x\": 1}").ok());
}

TEST(StoreStampTest, OnlyFileStoresHaveAStamp) {
  EXPECT_TRUE(HasStoreStamp("/var/lib/ringtrain/ringtrain.db"));
  EXPECT_TRUE(HasStoreStamp("ringtrain.db"));
  EXPECT_FALSE(HasStoreStamp(":memory:"));
  EXPECT_FALSE(HasStoreStamp("file:cluster?mode=memory&cache=shared"));
  EXPECT_EQ(StoreStampPath("/d/ringtrain.db"), "/d/ringtrain.db.stamp");
}

TEST(StoreStampTest, WriteReplacesTheFileAndReadFindsIt) {
  TempDir dir;
  const std::string path = dir / "ringtrain.db.stamp";
  auto absent = ReadStoreStamp(path);
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_FALSE(absent->has_value());

  ASSERT_TRUE(WriteStoreStamp(path, {3, 1000}).ok());
  ASSERT_TRUE(WriteStoreStamp(path, {4, 2000}).ok());
  auto read = ReadStoreStamp(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ((*read)->next_job_number, 4);
  EXPECT_EQ((*read)->written_unix_ms, 2000);
  // Nothing but the stamp is left in the folder (the temporary file was renamed).
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "ringtrain.db.stamp");
  }
  EXPECT_EQ(files, 1);
}

TEST(StoreStampTest, WriteIntoAMissingFolderNamesTheStamp) {
  TempDir dir;
  const std::string path = dir / "gone/ringtrain.db.stamp";
  absl::Status s = WriteStoreStamp(path, {2, 0});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(Contains(std::string(s.message()), path)) << s;
}

TEST(StoreStampTest, AnInvalidFileIsRefusedByName) {
  TempDir dir;
  const std::string path = dir / "ringtrain.db.stamp";
  WriteFile(path, "garbage\n");
  auto read = ReadStoreStamp(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(read.status().message(), "store stamp '" + path + "' is not valid: it is not JSON");
  WriteFile(path, std::string(100000, '{'));
  read = ReadStoreStamp(path);
  EXPECT_TRUE(Contains(std::string(read.status().message()), "it is 100000 bytes, not a stamp"))
      << read.status();
}

TEST(StoreStampTest, AStoreThatHeldAtLeastAsManyJobsMatches) {
  const StoreStamp stamp{3, 0};  // two jobs
  EXPECT_EQ(StoreStampMismatch("a.db", "a.db.stamp", stamp, 3), "");
  EXPECT_EQ(StoreStampMismatch("a.db", "a.db.stamp", stamp, 7), "");  // the stamp lags: fine
  // A stamp of a store that never held a job asks for nothing, not even the file.
  EXPECT_EQ(StoreStampMismatch("a.db", "a.db.stamp", {1, 0}, std::nullopt), "");
  EXPECT_EQ(StoreStampMismatch("a.db", "a.db.stamp", {1, 0}, 1), "");
}

TEST(StoreStampTest, AMissingEmptiedOrOlderStoreIsAMismatchNamingBothFiles) {
  const StoreStamp stamp{4, 1700000000000};  // three jobs
  const std::string missing = StoreStampMismatch("/d/r.db", "/d/r.db.stamp", stamp, std::nullopt);
  EXPECT_EQ(missing,
            "job store '/d/r.db' is missing, but its stamp '/d/r.db.stamp' says it held 3 jobs "
            "(the last job-000003, stamped 2023-11-14 22:13:20 UTC): starting without it would "
            "hand out job ids from job-000001 again and lose those jobs' history");
  const std::string emptied = StoreStampMismatch("/d/r.db", "/d/r.db.stamp", stamp, 1);
  EXPECT_TRUE(Contains(emptied,
                       "job store '/d/r.db' holds no jobs, but its stamp "
                       "'/d/r.db.stamp' says it held 3 jobs (the last job-000003"))
      << emptied;
  const std::string older = StoreStampMismatch("/d/r.db", "/d/r.db.stamp", stamp, 2);
  EXPECT_TRUE(Contains(older,
                       "job store '/d/r.db' holds 1 job (the last job-000001), but its "
                       "stamp '/d/r.db.stamp' says it held 3 jobs"))
      << older;
  EXPECT_TRUE(Contains(older, "hand out job ids from job-000002 again")) << older;
}

}  // namespace
}  // namespace ringtrain
