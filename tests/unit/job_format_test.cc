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

// A rank its agent refused never ran a trainer: no exit status of one is shown, only the reason.
TEST(JobFormatTest, ARefusedRankShowsNoTrainerExitStatus) {
  v1::Job job;
  job.set_job_id("job-000003");
  job.set_state(v1::JOB_STATE_FAILED);
  v1::JobError* error = job.mutable_error();
  error->set_rank(0);
  error->set_worker_id("worker-1");
  error->set_exit_status(126);
  error->set_cause("rank_refused");
  error->set_message(
      "rank 0 on worker-1 (h) was refused by its agent before a trainer started: "
      "training.dataset_path = \"/etc/x\": is outside --data-root /srv");
  const std::string text = FormatJobError(job);
  EXPECT_THAT(text, HasSubstr("is outside --data-root /srv"));
  EXPECT_THAT(text, HasSubstr("rank 0 on worker worker-1 was refused by its agent"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("status 126")));
  const std::string detail = FormatJobDetail(job, 0);
  EXPECT_THAT(detail, HasSubstr("(rank 0 on worker-1, refused by its agent)"));
  EXPECT_THAT(detail, ::testing::Not(HasSubstr("126")));
}

// A name stored before the coordinator refused bidi controls prints them escaped: an override
// (U+202E) would show the rest of the row, state and step columns included, right to left.
TEST(JobFormatTest, BidirectionalControlsInStoredNamesPrintEscaped) {
  v1::Job job;
  job.set_job_id("job-000002");
  job.set_name("report\u202ecod.exe\u2066x\u2069");
  job.set_state(v1::JOB_STATE_RUNNING);
  for (const std::string& text : {FormatJobTable({job}, 0), FormatJobDetail(job, 0)}) {
    EXPECT_THAT(text, HasSubstr("report\\u202ecod.exe\\u2066x\\u2069")) << text;
    EXPECT_EQ(text.find("\u202e"), std::string::npos) << text;
    EXPECT_EQ(text.find("\u2066"), std::string::npos) << text;
  }
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

TEST(JobFormatTest, WorkerDeviceNameEscapes) {
  v1::Worker w;
  w.set_worker_id("worker-0001");
  w.set_device("cuda:0");
  w.set_device_name(kEvil);
  const std::string table = FormatWorkerTable({w}, 0);
  ExpectNoControl(table);
  EXPECT_THAT(table, HasSubstr(std::string("cuda:0 ") + kEscaped));
}

TEST(JobFormatTest, FormatBytesInBinaryUnits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1.0 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(1048575), "1.0 MiB");  // 1023.999 KiB rounds up a unit, not to "1024.0"
  EXPECT_EQ(FormatBytes(uint64_t{24683584} * 1024), "23.5 GiB");
  EXPECT_EQ(FormatBytes(150110011392), "139.8 GiB");
  EXPECT_EQ(FormatBytes(UINT64_MAX), "16.0 EiB");
}

TEST(JobFormatTest, WorkerTableShowsDeviceAndMemory) {
  v1::Worker gpu;
  gpu.set_worker_id("worker-0001");
  gpu.set_device_kind("cuda");
  gpu.set_device("cuda:0");
  gpu.set_device_name("NVIDIA H200");
  gpu.set_device_memory_bytes(150110011392);
  gpu.set_state(v1::WORKER_STATE_IDLE);
  v1::Worker old;  // from a coordinator that sends neither device nor name
  old.set_worker_id("worker-0002");
  old.set_device_kind("cpu");
  old.set_state(v1::WORKER_STATE_IDLE);
  const std::string table = FormatWorkerTable({gpu, old}, 0);
  EXPECT_EQ(table,
            "ID           DEVICE              MEMORY     HOST  ADDRESS  STATE  JOB/RANK  "
            "LAST HEARTBEAT\n"
            "worker-0001  cuda:0 NVIDIA H200  139.8 GiB                 IDLE   -         -\n"
            "worker-0002  cpu                 -                         IDLE   -         -\n");
  const std::string json = MessageJson(gpu);
  EXPECT_THAT(json, HasSubstr("\"device\":\"cuda:0\""));
  EXPECT_THAT(json, HasSubstr("\"device_name\":\"NVIDIA H200\""));
  EXPECT_THAT(json, HasSubstr("\"device_memory_bytes\":\"150110011392\""));  // uint64: a string
}

TEST(JobFormatTest, DevicePeakShownOnlyWhenTheRecordHasOne) {
  v1::StepEvent cuda;
  cuda.set_job_id("job-000001");
  cuda.set_step(3);
  cuda.set_record_json(R"({"step":3,"loss":2.5,"device_memory_peak_bytes":65712324608,)"
                       R"("ranks":[{"rank":0,"device_memory_peak_bytes":65712324608}]})");
  EXPECT_EQ(DeviceMemoryPeakBytes(cuda), 65712324608u);
  EXPECT_THAT(StepEventJson(cuda),
              HasSubstr(",\"device_memory_peak_bytes\":65712324608,\"record\":"));
  Progress progress;
  progress.step = 3;
  progress.device_memory_peak_bytes = DeviceMemoryPeakBytes(cuda);
  EXPECT_THAT(ProgressLine(progress), HasSubstr("  device peak 61.2 GiB"));

  v1::StepEvent cpu = cuda;
  for (const char* record :
       {R"({"step":3,"loss":2.5})", R"({"step":3,"device_memory_peak_bytes":0})",
        R"({"step":3,"device_memory_peak_bytes":-5})",
        R"({"step":3,"device_memory_peak_bytes":"lots"})", "not json"}) {
    cpu.set_record_json(record);
    EXPECT_EQ(DeviceMemoryPeakBytes(cpu), 0u) << record;
    const std::string json = StepEventJson(cpu);  // the record itself may still hold it
    EXPECT_THAT(json.substr(0, json.find(",\"record\":")),
                ::testing::Not(HasSubstr("device_memory_peak_bytes")))
        << record;
  }
  cpu.set_record_json(R"({"step":3,"loss":2.5})");
  EXPECT_THAT(StepEventJson(cpu), ::testing::Not(HasSubstr("device_memory_peak_bytes")));
  progress.device_memory_peak_bytes = 0;
  EXPECT_THAT(ProgressLine(progress), ::testing::Not(HasSubstr("device peak")));
}

TEST(JobFormatTest, MfuShownOnlyWhenTheRecordHasIt) {
  v1::StepEvent event;
  event.set_job_id("job-000001");
  event.set_step(3);
  event.set_tokens_per_second(1234);
  event.set_record_json(R"({"step":3,"loss":2.5,"mfu_percent":41.3})");
  EXPECT_EQ(MfuPercentOf(event), 41.3);
  EXPECT_THAT(StepEventJson(event), HasSubstr(",\"mfu_percent\":41.3,\"record\":"));
  Progress progress;
  progress.step = 3;
  progress.tokens_per_second = 1234;
  progress.mfu_percent = MfuPercentOf(event);
  EXPECT_THAT(ProgressLine(progress), HasSubstr("  1234 tok/s  MFU 41.3%  elapsed "));

  for (const char* record : {R"({"step":3,"loss":2.5})", "not json"}) {
    event.set_record_json(record);
    EXPECT_EQ(MfuPercentOf(event), std::nullopt) << record;
    const std::string json = StepEventJson(event);
    EXPECT_THAT(json.substr(0, json.find(",\"record\":")), ::testing::Not(HasSubstr("mfu")))
        << record;
  }
  progress.mfu_percent.reset();
  EXPECT_THAT(ProgressLine(progress), HasSubstr("  1234 tok/s  elapsed "));
}

TEST(JobFormatTest, ErrorsAndStateChangesEscape) {
  const std::string line =
      CommandErrorLine("submit", absl::InvalidArgumentError(std::string("bad:\n  ") + kEvil));
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
