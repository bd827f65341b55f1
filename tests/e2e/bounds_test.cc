// The bounds of issue 12 against the real coordinator and ringctl (a coordinator with no workers):
// oversized configs, too many keys, deep nesting, long key paths (the inputs that crashed toml++),
// capped error lists, overflowing degrees, names with control characters, and paging of ListJobs
// and ListWorkers (raw calls and ringctl following the pages). After each refusal the coordinator
// must still answer.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "ringtrain/v1/worker_service.grpc.pb.h"
#include "tests/e2e/local_cluster.h"

namespace ringtrain::testing {
namespace {

std::chrono::system_clock::time_point In(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::string Repeat(const std::string& part, int n, const std::string& separator = "") {
  std::string out;
  for (int i = 0; i < n; ++i) out += (i == 0 ? "" : separator) + part;
  return out;
}

class BoundsTest : public ::testing::Test {
 protected:
  // No workers, but jobs are queued as if a pool of 16 could come (else FAILED_PRECONDITION).
  BoundsTest() : cluster_(0, {"--worker-timeout", "600", "--pool-size-hint", "16"}) {
    // With no workers to wait for, wait for the coordinator itself to answer.
    v1::ListJobsResponse response;
    grpc::ClientContext context;
    context.set_deadline(In(30));
    context.set_wait_for_ready(true);
    const grpc::Status s = cluster_.stub().ListJobs(&context, v1::ListJobsRequest(), &response);
    EXPECT_TRUE(s.ok()) << "the coordinator did not come up: " << s.error_message() << "\n"
                        << cluster_.Logs();
  }

  grpc::Status Submit(const std::string& config, const std::vector<std::string>& overrides = {},
                      const std::string& name = "", v1::Job* job = nullptr) {
    v1::SubmitJobRequest request;
    request.set_config_toml(config);
    for (const std::string& o : overrides) request.add_overrides(o);
    request.set_name(name);
    grpc::ClientContext context;
    context.set_deadline(In(20));
    v1::Job ignored;
    return cluster_.stub().SubmitJob(&context, request, job != nullptr ? job : &ignored);
  }

  // The coordinator still answers (a refusal must not have taken it down).
  void ExpectAlive() {
    v1::ListJobsRequest request;
    request.set_page_size(1);
    v1::ListJobsResponse response;
    grpc::ClientContext context;
    context.set_deadline(In(10));
    const grpc::Status s = cluster_.stub().ListJobs(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message() << "\n" << cluster_.Logs();
  }

  std::string Refusal(const std::string& config, const std::vector<std::string>& overrides = {},
                      const std::string& name = "") {
    const grpc::Status s = Submit(config, overrides, name);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    ExpectAlive();
    return s.error_message();
  }

  std::string Ringctl(const std::vector<std::string>& args, int* exit_code = nullptr) {
    std::vector<std::string> argv = {BinDir() + "/ringctl"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--coordinator", cluster_.address()});
    const CommandResult r = RunCommand(argv);
    if (exit_code != nullptr) *exit_code = r.exit_code;
    return r.output;
  }

  LocalCluster cluster_;
};

TEST_F(BoundsTest, OversizedConfigIsRefusedByName) {
  // 3.9 MB: under gRPC's 4 MiB, so it reaches admission; once a job that could never be assigned.
  const std::string big = "[training]\nsteps = 2\n" + std::string(3900000, '#') + "\n";
  EXPECT_NE(
      Refusal(big).find("the config is 3900022 bytes; at most 262144 bytes (256 KiB) are allowed"),
      std::string::npos);
  // Past the transport limit: refused by gRPC itself, and the coordinator survives that too.
  const grpc::Status s = Submit(std::string(5 * 1024 * 1024, '#'));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  ExpectAlive();
}

TEST_F(BoundsTest, CrashInputsAndStructuralLimitsAreRefused) {
  for (const char* name : {"dotted_key.toml", "table_header.toml", "array_of_tables.toml",
                           "inline_table_dotted_key.toml"}) {
    const std::string text = ReadFile(SourceDir() + "/tests/unit/fixtures/config_bounds/" + name);
    ASSERT_FALSE(text.empty()) << name;
    EXPECT_NE(Refusal(text).find("bytes long; at most 256 bytes are allowed"), std::string::npos)
        << name;
  }
  EXPECT_NE(Refusal("x = " + Repeat("[", 40) + Repeat("]", 40) + "\n")
                .find("brackets nest 40 levels deep"),
            std::string::npos);
  std::string keys = "[model]\n";
  for (int i = 0; i < 5000; ++i) keys += "k" + std::to_string(i) + " = 1\n";
  EXPECT_NE(Refusal(keys).find("the config has 5001 keys and table headers; at most 1024"),
            std::string::npos);
  EXPECT_NE(Refusal("", std::vector<std::string>(300, "training.steps=2"))
                .find("300 overrides; at most 256"),
            std::string::npos);
}

TEST_F(BoundsTest, HugeErrorListIsCapped) {
  // 1000 unknown keys (within the key limit) and 256 unknown overrides: 20 problems listed.
  std::string text = "[model]\n";
  for (int i = 0; i < 1000; ++i) text += "unknown_key_" + std::to_string(i) + " = 1\n";
  std::vector<std::string> overrides;
  for (int i = 0; i < 256; ++i) overrides.push_back("training.nope_" + std::to_string(i) + "=1");
  const std::string message = Refusal(text, overrides);
  EXPECT_NE(message.find("... and 1236 more problems"), std::string::npos)
      << message.substr(0, 2000);
  EXPECT_LT(message.size(), 20000u);
}

TEST_F(BoundsTest, OverflowingDegreeIsRefused) {
  EXPECT_NE(Refusal("", {"parallelism.data_parallel_replicate_degree=4294967297"})
                .find("parallelism.data_parallel_replicate_degree = 4294967297: must be -1 (fill "
                      "the world) or in "
                      "[1, 16384]"),
            std::string::npos);
}

// A 200 KB value used to come back whole in the error, over gRPC's 16 KiB trailer limit: the client
// saw RESOURCE_EXHAUSTED ("received metadata size exceeds hard limit") instead of the refusal.
TEST_F(BoundsTest, HugeValueIsEchoedOnlyInPart) {
  const std::string message =
      Refusal("[training]\ndataset = \"" + std::string(200 * 1024, 'v') + "\"\n");
  EXPECT_NE(message.find("training.dataset = \"vvvv"), std::string::npos) << message.substr(0, 300);
  EXPECT_LT(message.size(), 1024u) << message.substr(0, 300);
}

TEST_F(BoundsTest, NamesWithControlCharactersAreRefusedAndEscapedByRingctl) {
  EXPECT_NE(Refusal("", {}, "evil\x1b]0;title\x07").find("byte 4 is the control character U+001B"),
            std::string::npos);
  const TempDir dir;
  WriteFile(dir / "c.toml", "[training]\nsteps = 2\n");
  int code = 0;
  const std::string out = Ringctl({"submit", dir / "c.toml", "--name", "evil\x1b[2Jname"}, &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("evil\\x1b[2Jname"), std::string::npos) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  // A printable UTF-8 name is fine.
  v1::Job job;
  ASSERT_TRUE(Submit("", {}, "日本語のジョブ", &job).ok());
  EXPECT_NE(Ringctl({"list"}).find("日本語のジョブ"), std::string::npos);
}

TEST_F(BoundsTest, ListJobsIsPagedAndRingctlFollowsThePages) {
  for (int i = 0; i < 250; ++i) {
    const grpc::Status s = Submit("", {}, "job" + std::to_string(i));
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  // Raw pages: the default size, newest first, no job twice, the last page without a token.
  std::vector<std::string> names;
  v1::ListJobsRequest request;
  int pages = 0;
  do {
    v1::ListJobsResponse response;
    grpc::ClientContext context;
    context.set_deadline(In(10));
    const grpc::Status s = cluster_.stub().ListJobs(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_LE(response.jobs_size(), 100);
    for (const v1::Job& job : response.jobs()) names.push_back(job.name());
    request.set_page_token(response.next_page_token());
    ++pages;
  } while (!request.page_token().empty());
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(names.size(), 250u);
  EXPECT_EQ(names.front(), "job249");
  EXPECT_EQ(names.back(), "job0");
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), 250u);

  int code = 0;
  const std::string json = Ringctl({"list", "--output", "json"}, &code);
  ASSERT_EQ(code, 0) << json;
  EXPECT_EQ(nlohmann::json::parse(json).size(), 250u);

  // Bad page requests are INVALID_ARGUMENT.
  for (const auto& [size, token] : {std::pair{-1, std::string()},
                                    {10, std::string("garbage")},
                                    {10, std::string("jobs-after:job-999999")}}) {
    v1::ListJobsRequest bad;
    bad.set_page_size(size);
    bad.set_page_token(token);
    v1::ListJobsResponse response;
    grpc::ClientContext context;
    context.set_deadline(In(10));
    EXPECT_EQ(cluster_.stub().ListJobs(&context, bad, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << size << " " << token;
  }
}

TEST_F(BoundsTest, PagesStayWithinTheirByteBudget) {
  // Ten 200 KB configs (a comment pads each): 2 MB of jobs, so one page of up to 1000 cannot hold
  // all.
  const std::string config = "[training]\nsteps = 2\n# " + std::string(200000, 'x') + "\n";
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Submit(config).ok());
  v1::ListJobsRequest request;
  request.set_page_size(1000);
  v1::ListJobsResponse response;
  grpc::ClientContext context;
  context.set_deadline(In(10));
  ASSERT_TRUE(cluster_.stub().ListJobs(&context, request, &response).ok());
  EXPECT_GE(response.jobs_size(), 1);
  EXPECT_LE(response.jobs_size(), 5);
  EXPECT_LE(response.ByteSizeLong(), 1024u * 1024u + 8u);
  EXPECT_FALSE(response.next_page_token().empty());
  int code = 0;
  EXPECT_EQ(nlohmann::json::parse(Ringctl({"list", "--output", "json"}, &code)).size(), 10u);
  EXPECT_EQ(code, 0);
}

TEST_F(BoundsTest, ListWorkersIsPagedAndRingctlFollowsThePages) {
  auto workers = v1::WorkerService::NewStub(
      grpc::CreateChannel(cluster_.address(), grpc::InsecureChannelCredentials()));
  constexpr int kWorkers = 1050;
  for (int i = 0; i < kWorkers; ++i) {
    v1::RegisterRequest request;
    request.set_device_kind("cpu");
    request.set_device("cpu");
    request.set_host_label("host-" + std::to_string(i));
    request.set_address("127.0.0.1");
    v1::RegisterResponse response;
    grpc::ClientContext context;
    context.set_deadline(In(10));
    const grpc::Status s = workers->Register(&context, request, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  v1::ListWorkersRequest request;
  request.set_page_size(5000);  // read as 1000
  v1::ListWorkersResponse response;
  grpc::ClientContext context;
  context.set_deadline(In(10));
  ASSERT_TRUE(cluster_.stub().ListWorkers(&context, request, &response).ok());
  EXPECT_EQ(response.workers_size(), 1000);
  EXPECT_FALSE(response.next_page_token().empty());

  int code = 0;
  const std::string json = Ringctl({"workers", "--output", "json"}, &code);
  ASSERT_EQ(code, 0) << json.substr(0, 1000);
  const nlohmann::json listed = nlohmann::json::parse(json);
  ASSERT_EQ(listed.size(), static_cast<size_t>(kWorkers));
  std::set<std::string> ids;
  for (const auto& w : listed) ids.insert(w["worker_id"].get<std::string>());
  EXPECT_EQ(ids.size(), static_cast<size_t>(kWorkers));
}

}  // namespace
}  // namespace ringtrain::testing
