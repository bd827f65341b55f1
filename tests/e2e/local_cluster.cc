#include "tests/e2e/local_cluster.h"

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/grpc/credentials.h"

namespace ringtrain::testing {
namespace {

std::chrono::system_clock::time_point In(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

void Stop(Subprocess& process) {
  if (!process.running()) return;
  process.Signal(SIGTERM);
  if (WaitCommand(process, 10) == -1) {
    ADD_FAILURE() << "pid " << process.pid() << " ignored SIGTERM for 10 s";
  }
}

}  // namespace

LocalCluster::LocalCluster(int workers, std::vector<std::string> coordinator_flags,
                           std::vector<std::string> worker_flags, Protection protection,
                           StartOrder order)
    : coordinator_flags_(std::move(coordinator_flags)),
      protection_(protection),
      worker_flags_(std::move(worker_flags)) {
  std::filesystem::create_directories(data_root());
  address_ = "127.0.0.1:" + std::to_string(FreePort());
  // Rendezvous ports of this cluster's jobs: a block of 100 chosen by pid, so tests running side by
  // side rarely probe the same ports (the coordinator also skips ports in use), below the kernel's
  // ephemeral range (32768 up), where any outgoing connection could take a port the coordinator
  // found free before rank 0 binds it.
  const int first = 10000 + static_cast<int>(getpid() % 220) * 100;
  coordinator_flags_.push_back("--rendezvous-ports=" + std::to_string(first) + "-" +
                               std::to_string(first + 99));
  coordinator_metrics_ = "127.0.0.1:" + std::to_string(FreePort());
  coordinator_flags_.push_back("--metrics-address=" + coordinator_metrics_);
  if (protection_ == Protection::kTlsAndTokens) {
    const std::vector<std::string> tls = MakePki();
    coordinator_flags_.insert(coordinator_flags_.end(), tls.begin(), tls.end());
    worker_flags_.insert(worker_flags_.end(),
                         {"--tls-ca", Pki("ca.crt"), "--join-token-file", Pki("join-token")});
    absl::StatusOr<ChannelSecurity> loaded =
        LoadChannelSecurity({Pki("ca.crt"), "", ""}, "client-secret");
    if (!loaded.ok()) ADD_FAILURE() << loaded.status();
    if (loaded.ok()) security_ = *std::move(loaded);
  }
  if (order == StartOrder::kCoordinatorFirst) StartCoordinator();
  for (int i = 0; i < workers; ++i) {
    worker_metrics_.push_back("127.0.0.1:" + std::to_string(FreePort()));
    worker_starts_.push_back(0);
    workers_.emplace_back();
    StartWorker(i);
  }
  if (order == StartOrder::kAgentsFirst) {
    const bool tried = WaitFor(
        [&] {
          for (int i = 0; i < workers; ++i) {
            const std::string log = ReadFile(dir_ / ("worker-" + std::to_string(i) + ".log"));
            if (log.find("cannot reach coordinator") == std::string::npos) return false;
          }
          return true;
        },
        30);
    if (!tried) ADD_FAILURE() << "the agents never tried the absent coordinator\n" << Logs();
    StartCoordinator();
  }
  if (!WaitForIdleWorkers(workers, 30)) ADD_FAILURE() << "workers did not register\n" << Logs();
}

std::vector<std::string> LocalCluster::MakePki() {
  std::filesystem::create_directories(dir_ / "pki");
  const auto openssl = [](std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/openssl");
    const CommandResult r = RunCommand(args);
    if (r.exit_code != 0) ADD_FAILURE() << "openssl: " << r.output;
  };
  WriteFile(Pki("san.cnf"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
  openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
           "-days", "1", "-subj", "/CN=ringtrain test CA", "-keyout", Pki("ca.key"), "-out",
           Pki("ca.crt")});
  openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
           "/CN=127.0.0.1", "-keyout", Pki("server.key"), "-out", Pki("server.csr")});
  openssl({"x509", "-req", "-in", Pki("server.csr"), "-CA", Pki("ca.crt"), "-CAkey", Pki("ca.key"),
           "-CAcreateserial", "-days", "1", "-extfile", Pki("san.cnf"), "-out", Pki("server.crt")});
  WriteFile(Pki("client-tokens"), "client-secret\n");
  WriteFile(Pki("client-token"), "client-secret\n");
  WriteFile(Pki("join-token"), "join-secret\n");
  return {"--tls-cert",          Pki("server.crt"),    "--tls-key",           Pki("server.key"),
          "--client-token-file", Pki("client-tokens"), "--worker-token-file", Pki("join-token")};
}

std::vector<std::string> LocalCluster::ringctl_flags() const {
  std::vector<std::string> flags = {"--coordinator", address_};
  if (protection_ == Protection::kTlsAndTokens) {
    flags.insert(flags.end(), {"--tls-ca", Pki("ca.crt"), "--token-file", Pki("client-token")});
  }
  return flags;
}

void LocalCluster::StartWorker(int worker) {
  const std::string name = "worker-" + std::to_string(worker);
  std::vector<std::string> argv = {BinDir() + "/ringtrain-worker",
                                   "--coordinator",
                                   address_,
                                   "--work-dir",
                                   work_dir(worker),
                                   "--threads",
                                   "1",
                                   "--host-label",
                                   "local",
                                   "--advertise-address",
                                   "127.0.0.1",
                                   "--metrics-address",
                                   worker_metrics_.at(worker),
                                   "--data-root",
                                   data_root()};
  argv.insert(argv.end(), worker_flags_.begin(), worker_flags_.end());
  // The first start's log is worker-<i>.log, a restart's worker-<i>-<n>.log.
  const int starts = worker_starts_.at(worker)++;
  const std::string log =
      starts == 0 ? name + ".log" : name + "-" + std::to_string(starts) + ".log";
  workers_.at(worker) = StartCommand(argv, dir_ / log);
}

void LocalCluster::RestartWorker(int worker, int signo) {
  Subprocess& agent = workers_.at(worker);
  if (signo == SIGTERM) {
    Stop(agent);
  } else {
    agent.Signal(signo);
    WaitCommand(agent, 10);
  }
  StartWorker(worker);
}

LocalCluster::~LocalCluster() {
  for (Subprocess& worker : workers_) Stop(worker);
  Stop(coordinator_);
}

void LocalCluster::StartCoordinator() {
  std::vector<std::string> argv = {BinDir() + "/ringtrain-coordinator", "--listen", address_,
                                   "--db", dir_ / "ringtrain.db"};
  argv.insert(argv.end(), coordinator_flags_.begin(), coordinator_flags_.end());
  const std::string log = dir_ / ("coordinator-" + std::to_string(coordinator_starts_++) + ".log");
  coordinator_ = StartCommand(argv, log);
  // The stub's channel is made once the coordinator listens: a first attempt refused would leave
  // it in gRPC's connection backoff (over TLS, for longer than a test waits).
  if (!WaitFor([&] { return ReadFile(log).find(" listening on ") != std::string::npos; }, 20)) {
    ADD_FAILURE() << "the coordinator did not listen within 20 s\n" << Logs();
  }
  NewStub();
}

void LocalCluster::NewStub() {
  // A channel of its own for each coordinator process: a channel whose connection broke keeps
  // gRPC's connection backoff (seconds, growing) and, over TLS, may not connect again for long.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  stub_ = v1::JobService::NewStub(MakeChannel(address_, security_, args));
}

void LocalCluster::StopCoordinator(int signo) {
  if (signo == SIGTERM) {
    Stop(coordinator_);
  } else {
    coordinator_.Signal(signo);
    WaitCommand(coordinator_, 10);
  }
}

void LocalCluster::RestartCoordinator(int signo) {
  StopCoordinator(signo);
  StartCoordinator();
}

void LocalCluster::SignalWorker(int worker, int signo) {
  Subprocess& agent = workers_.at(worker);
  // The agent's own pid: its process group also holds nothing else (its trainers have their own).
  kill(agent.pid(), signo);
  if (signo == SIGKILL) WaitCommand(agent, 10);
}

int LocalCluster::WorkerOfProcess(pid_t pid) const {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (cmdline.find(work_dir(static_cast<int>(i)) + "/") != std::string::npos) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

v1::Job LocalCluster::Submit(const std::string& config, const std::vector<std::string>& overrides) {
  v1::SubmitJobRequest request;
  request.set_config_toml(ReadFile(config));
  for (const std::string& o : overrides) request.add_overrides(o);
  grpc::ClientContext context;
  context.set_deadline(In(10));
  v1::Job job;
  grpc::Status status = stub_->SubmitJob(&context, request, &job);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return job;
}

v1::Job LocalCluster::Get(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  grpc::ClientContext context;
  context.set_deadline(In(10));
  v1::Job job;
  grpc::Status status = stub_->GetJob(&context, request, &job);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return job;
}

std::vector<v1::Worker> LocalCluster::Workers() {
  grpc::ClientContext context;
  context.set_deadline(In(10));
  v1::ListWorkersResponse response;
  grpc::Status status = stub_->ListWorkers(&context, v1::ListWorkersRequest(), &response);
  if (!status.ok()) return {};  // e.g. while the coordinator restarts
  return {response.workers().begin(), response.workers().end()};
}

int LocalCluster::IdleWorkers() {
  int idle = 0;
  for (const v1::Worker& w : Workers()) idle += w.state() == v1::WORKER_STATE_IDLE;
  return idle;
}

bool LocalCluster::WaitForJob(const std::string& job_id,
                              const std::function<bool(const v1::Job&)>& done,
                              double timeout_seconds, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  v1::Job job;
  while (std::chrono::steady_clock::now() < deadline) {
    job = Get(job_id);
    if (done(job)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << job_id << ": no " << what << " within " << timeout_seconds
                << " s; last seen: " << job.ShortDebugString() << "\n"
                << Logs();
  return false;
}

bool LocalCluster::WaitForIdleWorkers(int n, double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (IdleWorkers() >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

CommandResult LocalCluster::Ringctl(std::vector<std::string> args) const {
  args.insert(args.begin(), BinDir() + "/ringctl");
  args.push_back("--coordinator");
  args.push_back(address_);
  return RunCommand(args);
}

std::vector<v1::JobEvent> LocalCluster::Watch(const std::string& job_id, int64_t from_step,
                                              double timeout_seconds, grpc::Status* status) {
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_from_step(from_step);
  grpc::ClientContext context;
  context.set_deadline(In(timeout_seconds));
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = stub_->WatchJob(&context, request);
  std::vector<v1::JobEvent> events;
  v1::JobEvent event;
  while (reader->Read(&event)) events.push_back(event);
  grpc::Status finished = reader->Finish();
  if (status != nullptr) *status = finished;
  return events;
}

pid_t LocalCluster::TrainerPid(const std::string& job_id, int rank) const {
  const std::string needle = "/" + job_id + "/rank-" + std::to_string(rank) + "/config.toml";
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find("ringtrain-trainer") != std::string::npos &&
        cmdline.find(dir_.path()) != std::string::npos &&
        cmdline.find(needle) != std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

std::string LocalCluster::Logs() const {
  std::ostringstream out;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    if (entry.path().extension() != ".log") continue;
    std::string text = ReadFile(entry.path());
    if (text.size() > 3000) text = "…" + text.substr(text.size() - 3000);
    out << "==== " << entry.path().filename().string() << "\n" << text << "\n";
  }
  return out.str();
}

std::string RawField(const std::string& json_line, const std::string& key) {
  const std::string quoted = "\"" + key + "\":";
  size_t pos = json_line.find(quoted);
  if (pos == std::string::npos) return "";
  pos += quoted.size();
  while (pos < json_line.size() && json_line[pos] == ' ') ++pos;
  const size_t end = json_line.find_first_of(",}", pos);
  return json_line.substr(pos, end - pos);
}

bool IgnoresSignal(pid_t pid, int signo) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigIgn:", 0) != 0) continue;
    const uint64_t mask = std::stoull(line.substr(7), nullptr, 16);
    return (mask >> (signo - 1)) & 1;
  }
  return false;
}

bool IsFinal(const v1::Job& job) {
  return job.state() == v1::JOB_STATE_SUCCEEDED || job.state() == v1::JOB_STATE_FAILED ||
         job.state() == v1::JOB_STATE_CANCELLED;
}

}  // namespace ringtrain::testing
