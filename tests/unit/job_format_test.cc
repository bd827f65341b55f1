// ringctl's text output of strings the server holds (client/job_format.h): job names, errors,
// wait reasons, stderr tails and worker host labels stored before names were checked, or sent by
// a misbehaving server, print escaped; JSON output escapes them its own way.
#include "client/job_format.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringtrain {
namespace {

using ::testing::HasSubstr;

constexpr char kEvil[] = "x\x1b]0;owned\x07\x1b[2J\xc2\x9b";
constexpr char kEscaped[] = "x\\x1b]0;owned\\x07\\x1b[2J\\u009b";

void ExpectNoControl(const std::string& text) {
  for (const char c : text) {
    EXPECT_FALSE(c == '\x1b' || c == '\x07' || c == '\r') << "raw control character in: " << text;
  }
  EXPECT_EQ(text.find("\xc2\x9b"), std::string::npos) << text;
}

v1::Job EvilJob() {
  v1::Job job;
  job.set_job_id("job-000001");
  job.set_name(kEvil);
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_wait_reason(kEvil);
  job.mutable_error()->set_message(std::string("failed: ") + kEvil);
  job.mutable_error()->set_worker_id(kEvil);
  job.mutable_error()->set_stderr_tail(std::string("line one\r\n") + kEvil + "\n");
  job.set_device_kind(kEvil);
  return job;
}

TEST(JobFormatTest, JobTableAndDetailEscapeServerStrings) {
  const std::string table = FormatJobTable({EvilJob()}, 0);
  ExpectNoControl(table);
  EXPECT_THAT(table, HasSubstr(kEscaped));
  const std::string detail = FormatJobDetail(EvilJob(), 0);
  ExpectNoControl(detail);
  EXPECT_THAT(detail, HasSubstr(std::string("job-000001  ") + kEscaped));
  EXPECT_THAT(detail, HasSubstr("| line one\\x0d"));
  const std::string error = FormatJobError(EvilJob());
  ExpectNoControl(error);
  EXPECT_THAT(error, HasSubstr(kEscaped));
}

TEST(JobFormatTest, WorkerTableEscapesHostLabels) {
  v1::Worker w;
  w.set_worker_id("worker-0001");
  w.set_host_label(kEvil);
  w.set_address("10.0.0.1\n");
  const std::string table = FormatWorkerTable({w}, 0);
  ExpectNoControl(table);
  EXPECT_THAT(table, HasSubstr(kEscaped));
  EXPECT_THAT(table, HasSubstr("10.0.0.1\\x0a"));
}

TEST(JobFormatTest, ErrorsAndStateChangesEscape) {
  const std::string line = CommandErrorLine("submit", absl::InvalidArgumentError(std::string("bad:\n  ") + kEvil));
  ExpectNoControl(line);
  EXPECT_EQ(line, std::string("ringctl submit: bad:\n  ") + kEscaped);
  v1::StateChange change;
  change.set_job_id("job-000001");
  change.set_from_state(v1::JOB_STATE_RUNNING);
  change.set_to_state(v1::JOB_STATE_FAILED);
  change.set_message(kEvil);
  const std::string state = StateChangeLine(change);
  ExpectNoControl(state);
  EXPECT_THAT(state, HasSubstr(kEscaped));
}

TEST(JobFormatTest, JsonEscapesItsOwnWay) {
  const std::string json = MessageJson(EvilJob());
  ExpectNoControl(json);
  EXPECT_THAT(json, HasSubstr("\\u001b"));
}

}  // namespace
}  // namespace ringtrain
