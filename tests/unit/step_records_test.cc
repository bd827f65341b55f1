// The agent's answer to a StepRecordsRequest (step_records.h): a rank's records read back from the
// metrics.jsonl its trainer wrote, each step once, in chunks; nothing outside the work dir.
#include "worker/agent/step_records.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using testing::TempDir;
using testing::WriteFile;

v1::StepRecordsRequest Request(const std::string& job_id, int64_t first, int64_t last) {
  v1::StepRecordsRequest request;
  request.set_job_id(job_id);
  request.set_rank(0);
  request.set_first_step(first);
  request.set_last_step(last);
  return request;
}

std::string Record(int step, double loss) {
  return "{\"step\":" + std::to_string(step) + ",\"loss\":" + std::to_string(loss) + "}";
}

std::vector<std::string> AllRecords(const std::vector<v1::AgentMessage>& answer) {
  std::vector<std::string> out;
  for (const v1::AgentMessage& m : answer) {
    for (const std::string& r : m.step_records().record_json()) out.push_back(r);
  }
  return out;
}

TEST(StepRecordsTest, AnswersEachStepInTheRangeOnceFromTheRanksFile) {
  TempDir dir;
  std::filesystem::create_directories(dir / "job-000007/rank-0");
  // A resumed run wrote steps 3-4 again; an eval line has no step; the last record is torn.
  WriteFile(dir / "job-000007/rank-0/metrics.jsonl",
            Record(1, 5) + "\n" + Record(2, 4) + "\n" + Record(3, 3) + "\n" + Record(4, 2) + "\n" +
                Record(3, 3) + "\n" + Record(4, 2) + "\n{\"validation_loss\":1.0}\n" +
                Record(5, 1) + "\n{\"step\":6,\"lo");
  const std::vector<v1::AgentMessage> answer =
      AnswerStepRecords(dir.path(), Request("job-000007", 2, 6));
  ASSERT_EQ(answer.size(), 1u);
  EXPECT_EQ(answer[0].step_records().job_id(), "job-000007");
  EXPECT_FALSE(answer[0].step_records().more());
  EXPECT_EQ(AllRecords(answer),
            (std::vector<std::string>{Record(2, 4), Record(3, 3), Record(4, 2), Record(5, 1)}));
}

TEST(StepRecordsTest, EarlierRunsFilesKeptAsideAreReadAfterTheCurrentOne) {
  TempDir dir;
  std::filesystem::create_directories(dir / "job-3/rank-0");
  // Run 1 reached step 4 here; run 2 resumed here from the checkpoint of step 3.
  WriteFile(dir / "job-3/rank-0/metrics.jsonl.1",
            Record(1, 5) + "\n" + Record(2, 4) + "\n" + Record(3, 3) + "\n" + Record(4, 2) + "\n");
  WriteFile(dir / "job-3/rank-0/metrics.jsonl", Record(4, 2) + "\n" + Record(5, 1) + "\n");
  EXPECT_EQ(AllRecords(AnswerStepRecords(dir.path(), Request("job-3", 1, 5))),
            (std::vector<std::string>{Record(4, 2), Record(5, 1), Record(1, 5), Record(2, 4),
                                      Record(3, 3)}));
  // Only kept files: the current run has written nothing yet.
  std::filesystem::remove(dir / "job-3/rank-0/metrics.jsonl");
  EXPECT_EQ(AllRecords(AnswerStepRecords(dir.path(), Request("job-3", 2, 3))),
            (std::vector<std::string>{Record(2, 4), Record(3, 3)}));
}

TEST(StepRecordsTest, ManyRecordsComeInChunksAllButTheLastSayingMore) {
  TempDir dir;
  std::filesystem::create_directories(dir / "job-1/rank-0");
  std::string text;
  const std::string padding(2000, 'x');  // ~2 KB a record: 1,000 records are about 2 MiB
  for (int step = 1; step <= 1000; ++step) {
    text += "{\"step\":" + std::to_string(step) + ",\"note\":\"" + padding + "\"}\n";
  }
  WriteFile(dir / "job-1/rank-0/metrics.jsonl", text);
  const std::vector<v1::AgentMessage> answer =
      AnswerStepRecords(dir.path(), Request("job-1", 1, 1000));
  ASSERT_GE(answer.size(), 2u);
  for (size_t i = 0; i < answer.size(); ++i) {
    EXPECT_EQ(answer[i].step_records().more(), i + 1 < answer.size()) << i;
    EXPECT_LE(answer[i].ByteSizeLong(), kStepRecordsChunkBytes + 4096) << i;
  }
  EXPECT_EQ(AllRecords(answer).size(), 1000u);
}

TEST(StepRecordsTest, NoFileOrAJobIdOutsideTheWorkDirIsOneEmptyAnswer) {
  TempDir dir;
  for (const std::string& job : {"job-2", "..", "../etc", ""}) {
    const std::vector<v1::AgentMessage> answer = AnswerStepRecords(dir.path(), Request(job, 1, 9));
    ASSERT_EQ(answer.size(), 1u) << job;
    EXPECT_EQ(answer[0].step_records().record_json_size(), 0) << job;
    EXPECT_FALSE(answer[0].step_records().more()) << job;
  }
}

}  // namespace
}  // namespace ringtrain
