// The worker agent against a fake coordinator (a real gRPC WorkerService on 127.0.0.1 that records
// what arrives and sends what a test tells it) and a fake trainer (a shell script whose behaviour
// the assignment's config sets). Most tests run the Agent class in-process; the last ones run the
// ringtrain-worker binary for its flags, its SIGTERM handling, what a SIGKILL leaves behind and
// its hold on the work dir.
#include "worker/agent/agent.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/integration/test_util.h"
#include "worker/agent/trainer_pid_file.h"

namespace ringtrain {
namespace {

using ::ringtrain::testing::TempDir;
using ::ringtrain::testing::WaitFor;
using Clock = std::chrono::steady_clock;
using ServerStream = grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::AgentMessage>;

// Issues ids "<prefix>-1", "<prefix>-2", ...; a Hello with an id it did not issue (and was not
// told to know) ends the session with NOT_FOUND, as a restarted coordinator does.
class FakeCoordinator final : public v1::WorkerService::Service {
 public:
  FakeCoordinator(int port, std::string prefix, std::set<std::string> known = {})
      : prefix_(std::move(prefix)), known_(std::move(known)) {
    grpc::ServerBuilder builder;
    int bound = 0;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(),
                             &bound);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    EXPECT_EQ(bound, port) << "cannot listen on port " << port;
  }
  ~FakeCoordinator() override { Stop(); }

  // Cancels the open session (the agent sees the coordinator go away) and stops serving.
  void Stop() {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    server_->Wait();
    server_.reset();
  }

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override {
    absl::MutexLock lock(&mu_);
    registrations_.push_back(*request);
    const std::string id = absl::StrCat(prefix_, "-", registrations_.size());
    known_.insert(id);
    response->set_worker_id(id);
    response->set_heartbeat_interval_ms(100);
    return grpc::Status::OK;
  }

  grpc::Status Session(grpc::ServerContext*, ServerStream* stream) override {
    v1::AgentMessage message;
    if (!stream->Read(&message) || !message.has_hello()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Hello must come first");
    }
    {
      absl::MutexLock lock(&mu_);
      if (known_.count(message.hello().worker_id()) == 0) {
        ++not_found_;
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown worker id");
      }
      hellos_.push_back(message.hello().worker_id());
      stream_ = stream;
      v1::CoordinatorMessage welcome;
      welcome.mutable_welcome();
      stream->Write(welcome);
    }
    while (stream->Read(&message)) {
      absl::MutexLock lock(&mu_);
      if (message.has_heartbeat()) {
        ++heartbeats_;
        continue;
      }
      messages_.push_back(message);
      if (acks_ && message.seq() != 0) {
        v1::CoordinatorMessage ack;
        ack.mutable_ack()->set_seq(message.seq());
        if (refuse_) ack.mutable_ack()->set_refused(refuse_(message));
        stream->Write(ack);
      }
    }
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
    return grpc::Status::OK;
  }

  // From now on, acknowledges every numbered message as the coordinator does, refusing it with
  // refuse(message) when that is not empty.
  void Acknowledge(std::function<std::string(const v1::AgentMessage&)> refuse = nullptr) {
    absl::MutexLock lock(&mu_);
    acks_ = true;
    refuse_ = std::move(refuse);
  }

  // Writes to the open session; false when there is none.
  bool Send(const v1::CoordinatorMessage& message) {
    absl::MutexLock lock(&mu_);
    return stream_ != nullptr && stream_->Write(message);
  }

  std::vector<v1::AgentMessage> messages() {
    absl::MutexLock lock(&mu_);
    return messages_;
  }
  std::vector<std::string> hellos() {
    absl::MutexLock lock(&mu_);
    return hellos_;
  }
  std::vector<v1::RegisterRequest> registrations() {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  int heartbeats() {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  int not_found() {
    absl::MutexLock lock(&mu_);
    return not_found_;
  }
  // The RankExit for `job_id` or nullptr.
  std::unique_ptr<v1::RankExit> ExitOf(const std::string& job_id) {
    for (const v1::AgentMessage& m : messages()) {
      if (m.has_rank_exit() && m.rank_exit().job_id() == job_id) {
        return std::make_unique<v1::RankExit>(m.rank_exit());
      }
    }
    return nullptr;
  }
  bool Started(const std::string& job_id) {
    for (const v1::AgentMessage& m : messages()) {
      if (m.has_rank_started() && m.rank_started().job_id() == job_id) return true;
    }
    return false;
  }

 private:
  const std::string prefix_;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::set<std::string> known_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::RegisterRequest> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> hellos_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::AgentMessage> messages_ ABSL_GUARDED_BY(mu_);
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  bool acks_ ABSL_GUARDED_BY(mu_) = false;
  std::function<std::string(const v1::AgentMessage&)> refuse_ ABSL_GUARDED_BY(mu_);
  int not_found_ ABSL_GUARDED_BY(mu_) = 0;
  ServerStream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// One line per message, for readable comparisons.
std::string Describe(const v1::AgentMessage& m) {
  if (m.has_rank_started()) {
    return absl::StrCat("started ", m.rank_started().job_id(), "/", m.rank_started().rank());
  }
  if (m.has_rank_report()) {
    return absl::StrCat("report ", m.rank_report().job_id(), "/", m.rank_report().rank(), " ",
                        m.rank_report().record_json());
  }
  if (m.has_rank_exit()) {
    return absl::StrCat("exit ", m.rank_exit().job_id(), "/", m.rank_exit().rank(), " status ",
                        m.rank_exit().exit_status(), " signal ", m.rank_exit().signal());
  }
  return "other";
}

// The fake trainer: records its arguments and rendezvous environment beside metrics.jsonl, then
// writes `steps` records (sleeping `pause` s after each) and exits with `exit` (all from comment
// lines "# steps = N" of the config, its first argument: the agent parses the config as a job's).
constexpr char kFakeTrainer[] = R"(#!/bin/sh
m=""
for a in "$@"; do case "$a" in --metrics.jsonl=*) m="${a#--metrics.jsonl=}";; esac; done
d=$(dirname "$m")
printf '%s\n' "$@" > "$d/args.txt"
echo "RANK=$RANK WORLD_SIZE=$WORLD_SIZE MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT OMP_NUM_THREADS=$OMP_NUM_THREADS" > "$d/env.txt"
steps=$(sed -n 's/^# steps = //p' "$1")
pause=$(sed -n 's/^# pause = //p' "$1")
code=$(sed -n 's/^# exit = //p' "$1")
i=1
while [ "$i" -le "${steps:-0}" ]; do
  echo "{\"step\":$i}" >> "$m"
  if [ -n "$pause" ]; then sleep "$pause"; fi
  i=$((i + 1))
done
echo "fake trainer done" >&2
exit "${code:-0}"
)";

v1::CoordinatorMessage Assign(const std::string& job_id, const std::string& config, int rank = 0,
                              int world_size = 1) {
  v1::CoordinatorMessage message;
  v1::Assignment* a = message.mutable_assignment();
  a->set_job_id(job_id);
  a->set_rank(rank);
  a->set_world_size(world_size);
  a->set_master_addr("10.0.0.5");
  a->set_master_port(29555);
  a->set_config_toml(config);
  a->set_device("cpu");
  return message;
}

v1::CoordinatorMessage CancelJob(const std::string& job_id, int rank = 0, int attempt = 0) {
  v1::CoordinatorMessage message;
  message.mutable_cancel()->set_job_id(job_id);
  message.mutable_cancel()->set_reason("test");
  message.mutable_cancel()->set_rank(rank);
  message.mutable_cancel()->set_attempt(attempt);
  return message;
}

// The seq of every message, in order.
std::vector<uint64_t> Seqs(const std::vector<v1::AgentMessage>& messages) {
  std::vector<uint64_t> seqs;
  for (const v1::AgentMessage& m : messages) seqs.push_back(m.seq());
  return seqs;
}

constexpr char kLongRun[] = "# steps = 1\n# pause = 30\n";

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFile(trainer_, kFakeTrainer);
    chmod(trainer_.c_str(), 0755);
  }
  void TearDown() override {
    if (agent_ != nullptr) {
      agent_->Shutdown();
      run_thread_.join();
      EXPECT_TRUE(run_status_.ok()) << run_status_;
    }
  }
  AgentOptions Options() {
    AgentOptions o;
    o.coordinator = absl::StrCat("127.0.0.1:", port_);
    o.host_label = "test-host";
    o.work_dir = dir_ / "work";
    o.trainer_path = trainer_;
    o.threads = 2;
    o.initial_backoff = std::chrono::milliseconds(100);
    o.max_backoff = std::chrono::milliseconds(500);
    return o;
  }
  void StartAgent() {
    absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Create(Options());
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = std::move(*agent);
    run_thread_ = std::thread([this] { run_status_ = agent_->Run(); });
  }
  // Starts the agent and waits until its session with `c` is open.
  void Connect(FakeCoordinator& c) {
    StartAgent();
    ASSERT_TRUE(WaitFor([&] { return !c.hellos().empty(); })) << "no Hello";
  }
  std::string RankDir(const std::string& job_id, int rank) {
    return dir_ / absl::StrCat("work/", job_id, "/rank-", rank);
  }
  // The agent's ringtrain_worker_connected gauge: whether its session is up.
  bool Connected() {
    for (const prometheus::MetricFamily& f : agent_->metrics()->Collect()) {
      if (f.name == "ringtrain_worker_connected") {
        return !f.metric.empty() && f.metric[0].gauge.value == 1;
      }
    }
    return false;
  }

  TempDir dir_;
  const std::string trainer_ = dir_ / "fake-trainer.sh";
  const int port_ = testing::FreePort();
  std::unique_ptr<FakeCoordinator> coordinator_ = std::make_unique<FakeCoordinator>(port_, "c1");
  std::unique_ptr<Agent> agent_;
  std::thread run_thread_;
  absl::Status run_status_;
};

TEST_F(AgentTest, RejectsBadOptionsNamingTheFlag) {
  AgentOptions o = Options();
  o.device = "tpu";
  EXPECT_TRUE(absl::StrContains(Agent::Create(o).status().message(), "cpu or cuda:N"));
  o = Options();
  o.trainer_path = dir_ / "missing";
  EXPECT_TRUE(absl::StrContains(Agent::Create(o).status().message(), "--trainer"));
  o = Options();
  o.threads = 0;
  EXPECT_TRUE(absl::StrContains(Agent::Create(o).status().message(), "--threads"));
  EXPECT_EQ(*DeviceKind("cuda:1"), "cuda");
  EXPECT_FALSE(DeviceKind("cuda:").ok());
}

TEST_F(AgentTest, RegistersSaysHelloAndHeartbeats) {
  Connect(*coordinator_);
  EXPECT_EQ(coordinator_->hellos(), std::vector<std::string>{"c1-1"});
  EXPECT_EQ(agent_->worker_id(), "c1-1");
  const std::vector<v1::RegisterRequest> r = coordinator_->registrations();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].device_kind(), "cpu");
  EXPECT_EQ(r[0].device(), "cpu");
  EXPECT_EQ(r[0].host_label(), "test-host");
  EXPECT_EQ(r[0].address(), "127.0.0.1");
  // The CPU as the kernel describes it: MemTotal read here with sscanf, in KiB.
  EXPECT_FALSE(r[0].device_name().empty());
  EXPECT_FALSE(absl::StartsWith(r[0].device_name(), "unknown")) << r[0].device_name();
  unsigned long long mem_total_kib = 0;
  if (FILE* meminfo = std::fopen("/proc/meminfo", "r")) {
    EXPECT_EQ(std::fscanf(meminfo, "MemTotal: %llu kB", &mem_total_kib), 1);
    std::fclose(meminfo);
  }
  EXPECT_EQ(r[0].device_memory_bytes(), mem_total_kib * 1024);
  EXPECT_TRUE(WaitFor([&] { return coordinator_->heartbeats() >= 5; }, 3));  // every 100 ms
}

TEST_F(AgentTest, AssignmentRunsTrainerAndRelaysReportsThenExitInOrder) {
  Connect(*coordinator_);
  v1::CoordinatorMessage assign = Assign("job-1", "# steps = 3\n# exit = 3\n", 0, 2);
  assign.mutable_assignment()->add_overrides("training.steps=3");
  assign.mutable_assignment()->add_overrides("model.dim=64");
  ASSERT_TRUE(coordinator_->Send(assign));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("job-1") != nullptr; }));

  std::vector<std::string> got;
  for (const v1::AgentMessage& m : coordinator_->messages()) got.push_back(Describe(m));
  EXPECT_EQ(
      got, (std::vector<std::string>{"started job-1/0", R"(report job-1/0 {"step":1})",
                                     R"(report job-1/0 {"step":2})", R"(report job-1/0 {"step":3})",
                                     "exit job-1/0 status 3 signal 0"}));
  EXPECT_GT(coordinator_->messages()[0].rank_started().pid(), 0);
  EXPECT_TRUE(absl::StrContains(coordinator_->ExitOf("job-1")->stderr_tail(), "fake trainer done"));

  const std::string rank_dir = RankDir("job-1", 0);
  EXPECT_EQ(testing::ReadFile(rank_dir + "/config.toml"), "# steps = 3\n# exit = 3\n");
  EXPECT_EQ(testing::ReadFile(rank_dir + "/env.txt"),
            "RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.0.0.5 MASTER_PORT=29555 OMP_NUM_THREADS=2\n");
  EXPECT_EQ(testing::ReadFile(rank_dir + "/args.txt"),
            absl::StrCat(rank_dir, "/config.toml\n--training.steps=3\n--model.dim=64\n",
                         "--metrics.jsonl=", rank_dir, "/metrics.jsonl\n--device=cpu\n"));
}

TEST_F(AgentTest, OnlyRankZeroRelaysRecordsButEveryRankExportsThem) {
  Connect(*coordinator_);
  ASSERT_TRUE(coordinator_->Send(Assign("job-1", "# steps = 3\n# exit = 0\n", 1, 2)));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("job-1") != nullptr; }));
  std::vector<std::string> got;
  for (const v1::AgentMessage& m : coordinator_->messages()) got.push_back(Describe(m));
  // Every rank's record holds the same global figures: only rank 0's go upstream.
  EXPECT_EQ(got, (std::vector<std::string>{"started job-1/1", "exit job-1/1 status 0 signal 0"}));
  // …but this agent's metrics have its rank's step.
  bool exported = false;
  for (const prometheus::MetricFamily& f : agent_->metrics()->Collect()) {
    if (f.name != "ringtrain_trainer_step") continue;
    ASSERT_EQ(f.metric.size(), 1u);
    EXPECT_EQ(f.metric[0].gauge.value, 3);
    exported = true;
  }
  EXPECT_TRUE(exported);
}

TEST_F(AgentTest, CancelStopsTheTrainerWithSigterm) {
  Connect(*coordinator_);
  ASSERT_TRUE(coordinator_->Send(Assign("long", kLongRun)));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->messages().size() >= 2; }));  // started, step 1
  const auto cancelled = Clock::now();
  ASSERT_TRUE(coordinator_->Send(CancelJob("other-job")));  // not ours: ignored
  ASSERT_TRUE(coordinator_->Send(CancelJob("long")));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("long") != nullptr; }, 5));
  EXPECT_LT(Clock::now() - cancelled, std::chrono::seconds(3));
  const std::unique_ptr<v1::RankExit> exit = coordinator_->ExitOf("long");
  EXPECT_EQ(exit->signal(), SIGTERM);
  EXPECT_EQ(exit->exit_status(), 0);
}

TEST_F(AgentTest, AssignmentWhileBusyIsRefusedWith125AndBadJobIdWith126) {
  Connect(*coordinator_);
  ASSERT_TRUE(coordinator_->Send(Assign("job-a", kLongRun)));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->Started("job-a"); }));
  ASSERT_TRUE(coordinator_->Send(Assign("job-b", "# steps = 1\n", 0, 2)));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("job-b") != nullptr; }));
  std::unique_ptr<v1::RankExit> busy = coordinator_->ExitOf("job-b");
  EXPECT_EQ(busy->exit_status(), 125);
  EXPECT_EQ(busy->stderr_tail(), "agent c1-1 is busy with job job-a rank 0");
  EXPECT_EQ(coordinator_->ExitOf("job-a"), nullptr);  // still running

  ASSERT_TRUE(coordinator_->Send(CancelJob("job-a")));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("job-a") != nullptr; }, 5));
  ASSERT_TRUE(coordinator_->Send(Assign("../escape", "# steps = 1\n")));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("../escape") != nullptr; }));
  std::unique_ptr<v1::RankExit> bad = coordinator_->ExitOf("../escape");
  EXPECT_EQ(bad->exit_status(), 126);
  EXPECT_TRUE(absl::StrContains(bad->stderr_tail(), "cannot name a folder")) << bad->stderr_tail();

  // An agent without --data-root refuses a job that reads data, saying how to give it one.
  ASSERT_TRUE(coordinator_->Send(Assign(
      "no-root", "# steps = 1\n[training]\ndataset = \"text\"\ndataset_path = \"c.txt\"\n")));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("no-root") != nullptr; }));
  std::unique_ptr<v1::RankExit> no_root = coordinator_->ExitOf("no-root");
  EXPECT_EQ(no_root->exit_status(), 126);
  EXPECT_TRUE(absl::StrContains(no_root->stderr_tail(), "this worker has no --data-root"))
      << no_root->stderr_tail();
}

// The coordinator's submit checks are not what confines a job: an assignment that reaches the
// agent with a path out of its roots (or a config it cannot read) fails before any trainer starts.
TEST_F(AgentTest, ResolvesJobPathsUnderItsRootsAndRefusesTheRestWith126) {
  namespace fs = std::filesystem;
  fs::create_directories(dir_ / "data");
  testing::WriteFile(dir_ / "data/corpus.txt", "tokens");
  testing::WriteFile(dir_ / "secret.txt", "TOPSECRET");
  const std::string data = fs::canonical(dir_ / "data").string();
  AgentOptions o = Options();
  o.data_root = dir_ / "data";
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Create(o);
  ASSERT_TRUE(agent.ok()) << agent.status();
  agent_ = std::move(*agent);
  run_thread_ = std::thread([this] { run_status_ = agent_->Run(); });
  ASSERT_TRUE(WaitFor([&] { return !coordinator_->hellos().empty(); })) << "no Hello";

  const std::string job = "# steps = 1\n[training]\ndataset = \"text\"\n";
  ASSERT_TRUE(coordinator_->Send(Assign(
      "paths-ok",
      job + "dataset_path = \"corpus.txt\"\n[checkpoint]\nenable = true\nfolder = \"ck\"\n")));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("paths-ok") != nullptr; }));
  EXPECT_EQ(coordinator_->ExitOf("paths-ok")->exit_status(), 0);
  const std::string work = fs::canonical(dir_ / "work").string();
  const std::string args = testing::ReadFile(RankDir("paths-ok", 0) + "/args.txt");
  EXPECT_TRUE(absl::StrContains(args, "--training.dataset_path=" + data + "/corpus.txt\n")) << args;
  EXPECT_TRUE(absl::StrContains(args, "--checkpoint.folder=" + work + "/checkpoints/paths-ok/ck\n"))
      << args;

  const struct {
    std::string job_id, config, expected;
  } refused[] = {
      {"climbs", job + "dataset_path = \"../secret.txt\"\n",
       "training.dataset_path = \"../secret.txt\""},
      {"absolute", job + "dataset_path = \"" + (dir_ / "secret.txt") + "\"\n",
       "--data-root " + data},
      {"unreadable", "steps = 1\n", "key 'steps' is not in a section"},
  };
  for (const auto& r : refused) {
    ASSERT_TRUE(coordinator_->Send(Assign(r.job_id, r.config)));
    ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf(r.job_id) != nullptr; })) << r.job_id;
    const std::unique_ptr<v1::RankExit> exit = coordinator_->ExitOf(r.job_id);
    EXPECT_EQ(exit->exit_status(), 126) << r.job_id;
    EXPECT_TRUE(absl::StrContains(exit->stderr_tail(), r.expected)) << exit->stderr_tail();
    EXPECT_FALSE(absl::StrContains(exit->stderr_tail(), "TOPSECRET"));
    EXPECT_FALSE(fs::exists(RankDir(r.job_id, 0)))
        << r.job_id << ": nothing is made for a refused rank";
  }
}

TEST_F(AgentTest, ReRegistersWhenARestartedCoordinatorDoesNotKnowIt) {
  Connect(*coordinator_);
  ASSERT_TRUE(coordinator_->Send(Assign("orphan", kLongRun)));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->Started("orphan"); }));
  const int trainer_pid = coordinator_->messages()[0].rank_started().pid();
  coordinator_.reset();  // gone; the agent keeps its trainer and retries

  ASSERT_TRUE(WaitFor([&] { return !Connected(); })) << "the agent did not see the session end";
  EXPECT_EQ(kill(trainer_pid, 0), 0) << "the trainer should outlive the session";
  FakeCoordinator restarted(port_, "c2");
  ASSERT_TRUE(WaitFor([&] { return !restarted.hellos().empty(); }, 10));
  EXPECT_GE(restarted.not_found(), 1);  // Hello with c1-1 first
  EXPECT_EQ(restarted.hellos(), std::vector<std::string>{"c2-1"});
  EXPECT_EQ(agent_->worker_id(), "c2-1");
  EXPECT_NE(kill(trainer_pid, 0), 0) << "the orphaned trainer should have been cancelled";
  // The orphan's RankStarted/RankExit belong to the old registration: none reaches c2.
  EXPECT_TRUE(WaitFor([&] { return restarted.heartbeats() >= 3; }, 3));
  EXPECT_TRUE(restarted.messages().empty());
}

TEST_F(AgentTest, KeepsTheTrainerAcrossABrokenSessionAndFlushesWhatItBuffered) {
  Connect(*coordinator_);
  ASSERT_TRUE(coordinator_->Send(Assign("steady", "# steps = 12\n# pause = 0.2\n")));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->messages().size() >= 3; }));  // + 2 steps
  const size_t relayed = coordinator_->messages().size() - 1;  // step records, as of now
  coordinator_.reset();
  // The trainer goes on while the session is down: wait until it has written 4 records more than
  // the first coordinator got, which the agent buffers meanwhile.
  ASSERT_TRUE(WaitFor([&] {
    const std::string jsonl = testing::ReadFile(RankDir("steady", 0) + "/metrics.jsonl");
    return !Connected() &&
           static_cast<size_t>(std::count(jsonl.begin(), jsonl.end(), '\n')) >= relayed + 4;
  }));
  FakeCoordinator back(port_, "c1b", {"c1-1"});  // knows the agent: the network broke, no restart
  ASSERT_TRUE(WaitFor([&] { return back.ExitOf("steady") != nullptr; }, 10));
  EXPECT_EQ(back.hellos(), std::vector<std::string>{"c1-1"});
  EXPECT_TRUE(back.registrations().empty());
  std::vector<int> steps;
  for (const v1::AgentMessage& m : back.messages()) {
    if (m.has_rank_report()) {
      steps.push_back(std::stoi(m.rank_report().record_json().substr(8)));  // {"step":N}
    }
  }
  ASSERT_GE(steps.size(), 6u);
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_EQ(steps[i], steps[i - 1] + 1);
  EXPECT_EQ(steps.back(), 12);
  EXPECT_EQ(Describe(back.messages().back()), "exit steady/0 status 0 signal 0");
}

TEST_F(AgentTest, KeepsEveryMessageUntilAcknowledgedAndWritesTheRestAgain) {
  Connect(*coordinator_);  // this coordinator acknowledges nothing
  ASSERT_TRUE(coordinator_->Send(Assign("acked", "# steps = 3\n")));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("acked") != nullptr; }));
  const std::vector<v1::AgentMessage> first = coordinator_->messages();
  EXPECT_EQ(Seqs(first), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  coordinator_.reset();  // the stream breaks before any Ack
  {
    FakeCoordinator back(port_, "c1b", {"c1-1"});
    back.Acknowledge();
    ASSERT_TRUE(WaitFor([&] { return back.ExitOf("acked") != nullptr; }, 10));
    // The same messages, with the same numbers, in the same order: the coordinator takes a seq
    // once.
    std::vector<std::string> again, before;
    for (const v1::AgentMessage& m : back.messages()) again.push_back(Describe(m));
    for (const v1::AgentMessage& m : first) before.push_back(Describe(m));
    EXPECT_EQ(again, before);
    EXPECT_EQ(Seqs(back.messages()), Seqs(first));
    ASSERT_TRUE(WaitFor([&] { return back.heartbeats() >= 3; }));  // its acks have been read
  }
  // Acknowledged: a third session gets nothing again.
  FakeCoordinator third(port_, "c1c", {"c1-1"});
  ASSERT_TRUE(WaitFor([&] { return third.hellos().size() == 1 && third.heartbeats() >= 5; }, 10));
  EXPECT_TRUE(third.messages().empty()) << Describe(third.messages().front());
}

TEST_F(AgentTest, ARefusedMessageIsDroppedNotWrittenAgain) {
  coordinator_->Acknowledge([](const v1::AgentMessage& m) -> std::string {
    return m.has_rank_report() ? "a record for a step outside the job's steps" : "";
  });
  Connect(*coordinator_);
  ASSERT_TRUE(coordinator_->Send(Assign("refused", "# steps = 2\n")));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("refused") != nullptr; }));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->heartbeats() >= 3; }));
  coordinator_.reset();
  FakeCoordinator back(port_, "c1b", {"c1-1"});
  ASSERT_TRUE(WaitFor([&] { return back.hellos().size() == 1 && back.heartbeats() >= 5; }, 10));
  EXPECT_TRUE(back.messages().empty()) << "refused messages are acknowledged, so dropped";
}

TEST_F(AgentTest, ACancelForARankThatEndedSendsItsExitAgain) {
  coordinator_->Acknowledge();
  Connect(*coordinator_);
  ASSERT_TRUE(coordinator_->Send(Assign("ended", "# steps = 1\n# exit = 4\n")));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("ended") != nullptr; }));
  const size_t before = coordinator_->messages().size();
  // The coordinator still counts this worker as running it (it never read the exit).
  ASSERT_TRUE(coordinator_->Send(CancelJob("ended")));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->messages().size() == before + 1; }));
  EXPECT_EQ(Describe(coordinator_->messages().back()), "exit ended/0 status 4 signal 0");
  // A rank this agent never ran (its assignment was lost): an exit that says so.
  ASSERT_TRUE(coordinator_->Send(CancelJob("lost", 3, 1)));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("lost") != nullptr; }));
  const std::unique_ptr<v1::RankExit> lost = coordinator_->ExitOf("lost");
  EXPECT_EQ(lost->rank(), 3);
  EXPECT_EQ(lost->attempt(), 1);
  EXPECT_EQ(lost->exit_status(), 127);
  EXPECT_TRUE(absl::StrContains(lost->stderr_tail(), "never started on this agent"))
      << lost->stderr_tail();
}

TEST_F(AgentTest, ARepeatedAssignmentRunsNothingAgainButTheNextRunDoes) {
  coordinator_->Acknowledge();
  Connect(*coordinator_);
  ASSERT_TRUE(coordinator_->Send(Assign("twice", "# steps = 1\n")));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->ExitOf("twice") != nullptr; }));
  ASSERT_TRUE(coordinator_->Send(Assign("twice", "# steps = 1\n")));  // the same run, again
  v1::CoordinatorMessage next = Assign("twice", "# steps = 1\n");
  next.mutable_assignment()->set_attempt(1);  // the job's next run
  ASSERT_TRUE(coordinator_->Send(next));
  ASSERT_TRUE(WaitFor([&] {
    int exits = 0;
    for (const v1::AgentMessage& m : coordinator_->messages()) exits += m.has_rank_exit();
    return exits == 2;
  }));
  std::vector<int> started_attempts;
  for (const v1::AgentMessage& m : coordinator_->messages()) {
    if (m.has_rank_started()) started_attempts.push_back(m.rank_started().attempt());
  }
  EXPECT_EQ(started_attempts, (std::vector<int>{0, 1}));
}

TEST_F(AgentTest, ShutdownWhileDisconnectedStopsTheTrainerAndReturns) {
  Connect(*coordinator_);
  ASSERT_TRUE(coordinator_->Send(Assign("alone", kLongRun)));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->Started("alone"); }));
  const int trainer_pid = coordinator_->messages()[0].rank_started().pid();
  coordinator_.reset();
  ASSERT_TRUE(WaitFor([&] { return !Connected(); })) << "the agent did not see the session end";
  const auto stopped = Clock::now();
  agent_->Shutdown();
  run_thread_.join();
  agent_.reset();
  EXPECT_LT(Clock::now() - stopped, std::chrono::seconds(3));
  EXPECT_NE(kill(trainer_pid, 0), 0);
}

// The binary: flags reach Register and the trainer; SIGTERM cancels the trainer, reports its exit
// and ends the agent with status 0.
TEST_F(AgentTest, BinaryRegistersWithItsFlagsAndStopsCleanlyOnSigterm) {
  testing::WriteFile(dir_ / "join-token", "join-secret\n");
  Subprocess worker = testing::StartCommand(
      {testing::BinDir() + "/ringtrain-worker", "--coordinator", Options().coordinator, "--device",
       "cuda:3", "--host-label", "bin-host", "--advertise-address", "10.1.2.3", "--work-dir",
       dir_ / "work", "--trainer", trainer_, "--join-token-file", dir_ / "join-token"},
      dir_ / "worker.log");
  ASSERT_TRUE(WaitFor([&] { return !coordinator_->hellos().empty(); }))
      << testing::ReadFile(dir_ / "worker.log");
  // The join token goes in cleartext to the loopback coordinator, with one warning.
  const std::string log = testing::ReadFile(dir_ / "worker.log");
  const std::string warning = "warning: sending the token of --join-token-file " +
                              (dir_ / "join-token") + " in cleartext to " + Options().coordinator;
  EXPECT_TRUE(absl::StrContains(log, warning)) << log;
  EXPECT_EQ(log.find(warning), log.rfind(warning)) << log;
  const v1::RegisterRequest r = coordinator_->registrations().at(0);
  EXPECT_EQ(r.device_kind(), "cuda");
  EXPECT_EQ(r.device(), "cuda:3");
  EXPECT_EQ(r.host_label(), "bin-host");
  EXPECT_EQ(r.address(), "10.1.2.3");
  // Without a driver, or with fewer than four GPUs, cuda:3 cannot be described: the agent warns,
  // still registers (scheduling tests run GPU-less), and says why in the name.
  if (r.device_memory_bytes() == 0) {
    EXPECT_TRUE(absl::StartsWith(r.device_name(), "unknown (")) << r.device_name();
    EXPECT_TRUE(absl::StrContains(testing::ReadFile(dir_ / "worker.log"), "device 'cuda:3': "))
        << testing::ReadFile(dir_ / "worker.log");
  } else {
    EXPECT_TRUE(absl::StrContains(r.device_name(), "NVIDIA")) << r.device_name();
  }

  ASSERT_TRUE(coordinator_->Send(Assign("sig", kLongRun)));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->messages().size() >= 2; }));
  const int trainer_pid = coordinator_->messages()[0].rank_started().pid();
  worker.Signal(SIGTERM);
  EXPECT_EQ(testing::WaitCommand(worker, 8), 0) << testing::ReadFile(dir_ / "worker.log");
  EXPECT_NE(kill(trainer_pid, 0), 0);
  const std::unique_ptr<v1::RankExit> exit = coordinator_->ExitOf("sig");
  ASSERT_NE(exit, nullptr) << "the RankExit should be sent before the stream closes";
  EXPECT_EQ(exit->signal(), SIGTERM);
  EXPECT_TRUE(
      absl::StrContains(testing::ReadFile(RankDir("sig", 0) + "/args.txt"), "--device=cuda:3"));
}

TEST_F(AgentTest, BinaryRejectsBadFlagsWithExitCode2) {
  const std::string worker = testing::BinDir() + "/ringtrain-worker";
  testing::CommandResult r =
      testing::RunCommand({worker, "--device", "tpu", "--trainer", trainer_});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.output, "expected cpu or cuda:N")) << r.output;
  r = testing::RunCommand({worker, "--trainer", dir_ / "nope"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.output, "does not exist")) << r.output;
  // A join token never goes in cleartext to another machine: refused before anything starts.
  testing::WriteFile(dir_ / "join-token", "join-secret\n");
  r = testing::RunCommand({worker, "--coordinator", "192.0.2.1:50051", "--join-token-file",
                           dir_ / "join-token", "--work-dir", dir_ / "refused", "--trainer",
                           trainer_});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "refusing to send the token of --join-token-file " +
                                              (dir_ / "join-token") +
                                              " in cleartext to 192.0.2.1:50051"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "Give --tls-ca FILE")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "refused"));
}

// Whether a listening socket can be bound on 127.0.0.1:port now (SO_REUSEADDR, as a restarted
// rendezvous store binds): false while another process still listens on it.
bool CanListenOn(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok =
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && listen(fd, 1) == 0;
  close(fd);
  return ok;
}

// An agent killed by SIGKILL cannot stop its trainer: the kernel does (PR_SET_PDEATHSIG), so the
// device and the rendezvous port are free again at once, and the next agent on the work dir starts
// (the kernel dropped the lock too) and clears the record the dead one left.
TEST_F(AgentTest, BinaryKilledBySigkillTakesItsTrainerWithIt) {
  const int port = testing::FreePort();
  const std::string trainer = dir_ / "listening-trainer.sh";
  testing::WriteFile(trainer, absl::StrCat(R"(#!/bin/sh
m=""
for a in "$@"; do case "$a" in --metrics.jsonl=*) m="${a#--metrics.jsonl=}";; esac; done
exec ")",
                                           testing::PythonPath(), R"(" -c '
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", )",
                                           port, R"())
s.listen()
open(sys.argv[1], "w").write("listening\n")
time.sleep(60)
' "$(dirname "$m")/listening"
)"));
  chmod(trainer.c_str(), 0755);
  const std::vector<std::string> argv = {testing::BinDir() + "/ringtrain-worker",
                                         "--coordinator",
                                         Options().coordinator,
                                         "--work-dir",
                                         dir_ / "work",
                                         "--trainer",
                                         trainer};
  Subprocess worker = testing::StartCommand(argv, dir_ / "worker.log");
  ASSERT_TRUE(WaitFor([&] { return !coordinator_->hellos().empty(); }))
      << testing::ReadFile(dir_ / "worker.log");
  ASSERT_TRUE(coordinator_->Send(Assign("pd", kLongRun)));
  ASSERT_TRUE(WaitFor([&] { return !testing::ReadFile(RankDir("pd", 0) + "/listening").empty(); }))
      << testing::ReadFile(dir_ / "worker.log");
  ASSERT_FALSE(coordinator_->messages().empty());
  const pid_t trainer_pid = coordinator_->messages()[0].rank_started().pid();
  ASSERT_TRUE(testing::IsRunning(trainer_pid));
  EXPECT_FALSE(CanListenOn(port));

  kill(worker.pid(), SIGKILL);  // the agent alone: the trainer has a process group of its own
  EXPECT_EQ(testing::WaitCommand(worker, 5), 128 + SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return !testing::IsRunning(trainer_pid); }, 2))
      << "the trainer outlived its agent";
  EXPECT_TRUE(WaitFor([&] { return CanListenOn(port); }, 2)) << "port " << port << " still taken";

  const std::string pid_file = RankDir("pd", 0) + "/trainer.pid";
  EXPECT_EQ(access(pid_file.c_str(), F_OK), 0) << "a killed agent cannot remove trainer.pid";
  Subprocess next = testing::StartCommand(argv, dir_ / "next.log");
  ASSERT_TRUE(WaitFor([&] { return coordinator_->hellos().size() >= 2; }))
      << testing::ReadFile(dir_ / "next.log");
  EXPECT_NE(access(pid_file.c_str(), F_OK), 0) << "the next agent leaves the stale record";
  next.Signal(SIGTERM);
  EXPECT_EQ(testing::WaitCommand(next, 8), 0) << testing::ReadFile(dir_ / "next.log");
}

TEST_F(AgentTest, BinaryRefusesAWorkDirAnotherAgentHolds) {
  Subprocess first = testing::StartCommand(
      {testing::BinDir() + "/ringtrain-worker", "--coordinator", Options().coordinator,
       "--work-dir", dir_ / "work", "--trainer", trainer_},
      dir_ / "worker.log");
  ASSERT_TRUE(WaitFor([&] { return !coordinator_->hellos().empty(); }))
      << testing::ReadFile(dir_ / "worker.log");
  const testing::CommandResult second = testing::RunCommand(
      {testing::BinDir() + "/ringtrain-worker", "--coordinator", Options().coordinator,
       "--work-dir", dir_ / "work", "--trainer", trainer_});
  EXPECT_EQ(second.exit_code, 2) << second.output;
  EXPECT_TRUE(absl::StrContains(second.output, "work dir '" + dir_ / "work" + "' is in use"))
      << second.output;
  EXPECT_TRUE(absl::StrContains(second.output, absl::StrCat("pid ", first.pid()))) << second.output;
  EXPECT_EQ(coordinator_->registrations().size(), 1u) << "the second agent registered";
  first.Signal(SIGTERM);
  EXPECT_EQ(testing::WaitCommand(first, 8), 0) << testing::ReadFile(dir_ / "worker.log");
}

// A trainer that outlived its agent (one started before trainers died with their agent, or one
// the kernel had not killed yet) is stopped by the next agent before it registers.
TEST_F(AgentTest, BinaryStopsATrainerItsPredecessorLeft) {
  SpawnOptions sleep;
  sleep.argv = {"/bin/sleep", "30"};
  absl::StatusOr<Subprocess> leftover = Subprocess::Start(sleep);
  ASSERT_TRUE(leftover.ok()) << leftover.status();
  const std::string rank_dir = RankDir("old-job", 3);
  std::filesystem::create_directories(rank_dir);
  ASSERT_TRUE(WriteTrainerPidFile(rank_dir + "/trainer.pid", *RecordOf(leftover->pid())).ok());

  Subprocess worker = testing::StartCommand(
      {testing::BinDir() + "/ringtrain-worker", "--coordinator", Options().coordinator,
       "--work-dir", dir_ / "work", "--trainer", trainer_},
      dir_ / "worker.log");
  EXPECT_EQ(leftover->Wait(std::chrono::milliseconds(5000)), 128 + SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return !coordinator_->hellos().empty(); }))
      << testing::ReadFile(dir_ / "worker.log");
  EXPECT_TRUE(absl::StrContains(testing::ReadFile(dir_ / "worker.log"),
                                absl::StrCat("killed a trainer a previous agent left running: job "
                                             "old-job rank 3, pid ",
                                             leftover->pid())))
      << testing::ReadFile(dir_ / "worker.log");
  EXPECT_NE(access((rank_dir + "/trainer.pid").c_str(), F_OK), 0);
  worker.Signal(SIGTERM);
  EXPECT_EQ(testing::WaitCommand(worker, 8), 0) << testing::ReadFile(dir_ / "worker.log");
}

}  // namespace
}  // namespace ringtrain
