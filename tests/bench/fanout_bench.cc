// fanout_bench: how many events per second the coordinator fans out to many watchers.
//
// Starts a real ringtrain-coordinator, registers one scripted agent over the real WorkerService
// (a 1-rank "job" whose rank reports steps as fast as the stream takes them, so the coordinator,
// not a trainer, is the bottleneck), opens W WatchJob streams, one of them a deliberately slow
// reader, and measures the time from the first report to the moment every fast watcher has every
// step. Prints events/s delivered, the agent's report rate, and the slow watcher's outcome.
// With --tls it runs twice, plaintext and then TLS with both token files (a CA and a certificate
// made with openssl in a temporary folder), and prints the TLS/plaintext ratios.
//   fanout_bench [--watchers 50] [--steps 5000] [--bin-dir build/bin] [--tls]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/grpc/credentials.h"
#include "ringtrain/v1/job_service.grpc.pb.h"
#include "ringtrain/v1/worker_service.grpc.pb.h"
#include "tests/integration/test_util.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = ringtrain::v1;

constexpr char kConfig[] = R"(
[model]
dim = 64
n_layers = 1
n_heads = 4
n_kv_heads = 2
vocab_size = 64
multiple_of = 32
max_seq_len = 256
[training]
seq_len = 64
local_batch_size = 2
steps = STEPS
[lr_scheduler]
warmup_steps = 0
)";

std::chrono::system_clock::time_point In(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

// The coordinator's ringtrain_coordinator_watchers gauge, read from its /metrics; -1 if unread.
int OpenWatchers(const std::string& metrics_address) {
  const std::string page = ringtrain::testing::HttpGet(metrics_address, "/metrics");
  const std::string name = "\nringtrain_coordinator_watchers ";
  const size_t at = page.find(name);
  return at == std::string::npos ? -1 : std::atoi(page.c_str() + at + name.size());
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "fanout_bench: %s\n", what.c_str());
  return 1;
}

// A CA, a server certificate for 127.0.0.1 and two token files in `dir`; false if openssl failed.
bool MakeCredentials(const ringtrain::testing::TempDir& dir) {
  ringtrain::testing::WriteFile(dir / "san.cnf", "subjectAltName=IP:127.0.0.1\n");
  ringtrain::testing::WriteFile(dir / "client-token", "bench-client\n");
  ringtrain::testing::WriteFile(dir / "join-token", "bench-join\n");
  const std::vector<std::vector<std::string>> commands = {
      {"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=bench-ca",
       "-keyout", dir / "ca.key", "-out", dir / "ca.crt"},
      {"req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=bench", "-keyout", dir / "server.key",
       "-out", dir / "server.csr"},
      {"x509", "-req", "-in", dir / "server.csr", "-CA", dir / "ca.crt", "-CAkey", dir / "ca.key",
       "-CAcreateserial", "-days", "1", "-extfile", dir / "san.cnf", "-out", dir / "server.crt"}};
  for (const std::vector<std::string>& args : commands) {
    std::vector<std::string> argv = {"/usr/bin/openssl"};
    argv.insert(argv.end(), args.begin(), args.end());
    const ringtrain::testing::CommandResult r = ringtrain::testing::RunCommand(argv);
    if (r.exit_code != 0) {
      std::fprintf(stderr, "fanout_bench: openssl failed: %s\n", r.output.c_str());
      return false;
    }
  }
  return true;
}

struct Figures {
  double reports_per_second = 0;
  double events_per_second = 0;
  bool ok = false;
};

Figures Run(const std::string& bin_dir, int watchers, int steps, bool tls);

}  // namespace

int main(int argc, char** argv) {
  int watchers = 50;
  int steps = 5000;
  bool tls = false;
  std::string bin_dir = ringtrain::testing::BinDir();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tls")) tls = true;
    if (i + 1 >= argc) continue;
    if (!std::strcmp(argv[i], "--watchers")) watchers = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--bin-dir")) bin_dir = argv[i + 1];
  }
  const Figures plain = Run(bin_dir, watchers, steps, false);
  if (!tls) return plain.ok ? 0 : 1;
  const Figures secure = Run(bin_dir, watchers, steps, true);
  std::printf("fanout_bench: TLS + tokens / plaintext: reports/s %.2f, events/s fanned out %.2f\n",
              secure.reports_per_second / plain.reports_per_second,
              secure.events_per_second / plain.events_per_second);
  return plain.ok && secure.ok ? 0 : 1;
}

namespace {

Figures Run(const std::string& bin_dir, int watchers, int steps, bool tls) {
  Figures figures;
  ringtrain::testing::TempDir dir;
  const std::string address = "127.0.0.1:" + std::to_string(ringtrain::testing::FreePort());
  const std::string metrics = "127.0.0.1:" + std::to_string(ringtrain::testing::FreePort());
  std::vector<std::string> argv = {bin_dir + "/ringtrain-coordinator",
                                   "--listen",
                                   address,
                                   "--db",
                                   dir / "bench.db",
                                   "--metrics-address",
                                   metrics};
  ringtrain::ChannelSecurity client, agent;
  if (tls) {
    if (!MakeCredentials(dir)) return figures;
    argv.insert(argv.end(), {"--tls-cert", dir / "server.crt", "--tls-key", dir / "server.key",
                             "--client-token-file", dir / "client-token", "--worker-token-file",
                             dir / "join-token"});
    auto c = ringtrain::LoadChannelSecurity({dir / "ca.crt", "", ""}, "bench-client");
    auto a = ringtrain::LoadChannelSecurity({dir / "ca.crt", "", ""}, "bench-join");
    if (!c.ok() || !a.ok()) {
      Fail("credentials: " + std::string((c.ok() ? a.status() : c.status()).message()));
      return figures;
    }
    client = *c;
    agent = *a;
  }
  ringtrain::Subprocess coordinator =
      ringtrain::testing::StartCommand(argv, dir / "coordinator.log");
  // One channel per role, as in a real cluster (the agent and ringctl are different processes).
  auto job_channel = ringtrain::MakeChannel(address, client, grpc::ChannelArguments());
  auto worker_channel = ringtrain::MakeChannel(address, agent, grpc::ChannelArguments());
  if (!job_channel->WaitForConnected(In(10)) || !worker_channel->WaitForConnected(In(10))) {
    Fail("coordinator did not start");
    return figures;
  }
  auto workers = v1::WorkerService::NewStub(worker_channel);
  auto jobs = v1::JobService::NewStub(job_channel);

  // The scripted agent.
  v1::RegisterRequest reg;
  reg.set_device_kind("cpu");
  reg.set_device("cpu");
  reg.set_host_label("bench");
  reg.set_address("127.0.0.1");
  v1::RegisterResponse registered;
  {
    grpc::ClientContext context;
    context.set_deadline(In(5));
    if (!workers->Register(&context, reg, &registered).ok()) {
      Fail("register failed");
      return figures;
    }
  }
  grpc::ClientContext session_context;
  auto session = workers->Session(&session_context);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_worker_id(registered.worker_id());
  hello.mutable_hello()->set_credential(registered.credential());
  session->Write(hello);

  std::string config = kConfig;
  config.replace(config.find("STEPS"), 5, std::to_string(steps));
  v1::SubmitJobRequest submit;
  submit.set_config_toml(config);
  v1::Job job;
  {
    grpc::ClientContext context;
    context.set_deadline(In(5));
    grpc::Status s = jobs->SubmitJob(&context, submit, &job);
    if (!s.ok()) {
      Fail("submit: " + s.error_message());
      return figures;
    }
  }
  v1::CoordinatorMessage assignment;  // after the session's Welcome
  while (session->Read(&assignment) && assignment.has_welcome()) {
  }
  if (!assignment.has_assignment()) {
    Fail("no assignment");
    return figures;
  }

  // Watchers: index 0 is slow (5 ms per event); the others read as fast as they can.
  std::atomic<int> fast_done{0};
  std::vector<int64_t> received(watchers, 0);
  std::vector<double> finished_at(watchers, 0);
  std::atomic<bool> go{false};
  Clock::time_point start;
  std::vector<std::thread> threads;
  for (int w = 0; w < watchers; ++w) {
    threads.emplace_back([&, w] {
      v1::WatchJobRequest request;
      request.set_job_id(job.job_id());
      grpc::ClientContext context;
      context.set_deadline(In(600));
      auto reader = jobs->WatchJob(&context, request);
      v1::JobEvent event;
      while (reader->Read(&event)) {
        if (event.has_step()) {
          ++received[w];
          if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      finished_at[w] = std::chrono::duration<double>(Clock::now() - start).count();
      if (w != 0) ++fast_done;
      reader->Finish();
    });
  }
  // The clock starts once every watcher has subscribed, as the coordinator counts them.
  if (!ringtrain::testing::WaitFor([&] { return OpenWatchers(metrics) >= watchers; }, 30)) {
    std::fprintf(stderr,
                 "fanout_bench: %d of %d watchers subscribed after 30 s; measuring anyway\n",
                 OpenWatchers(metrics), watchers);
  }

  start = Clock::now();
  v1::AgentMessage started;
  started.mutable_rank_started()->set_job_id(job.job_id());
  session->Write(started);
  for (int step = 1; step <= steps; ++step) {
    v1::AgentMessage report;
    report.mutable_rank_report()->set_job_id(job.job_id());
    report.mutable_rank_report()->set_record_json(
        "{\"step\": " + std::to_string(step) +
        ", \"loss\": 1.5, \"grad_norm\": 1, \"lr\": 0.001, "
        "\"tokens_per_second\": 1000, \"step_seconds\": 0.1}");
    session->Write(report);
  }
  const double report_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  v1::AgentMessage exit;
  exit.mutable_rank_exit()->set_job_id(job.job_id());
  session->Write(exit);

  for (std::thread& t : threads) t.join();
  double fast_last = 0;
  int64_t fast_events = 0;
  bool complete = true;
  for (int w = 1; w < watchers; ++w) {
    fast_last = std::max(fast_last, finished_at[w]);
    fast_events += received[w];
    complete = complete && received[w] == steps;
  }
  std::printf("fanout_bench (%s): %d watchers (1 slow reader at 5 ms/event), %d step events\n",
              tls ? "TLS + tokens" : "plaintext", watchers, steps);
  std::printf(
      "  agent -> coordinator: %d reports in %.2f s (%.0f reports/s, each stored in SQLite)\n",
      steps, report_seconds, steps / report_seconds);
  std::printf(
      "  fast watchers: %lld events in %.2f s = %.0f events/s fanned out; every fast "
      "watcher got every step: %s\n",
      static_cast<long long>(fast_events), fast_last, fast_events / fast_last,
      complete ? "yes" : "NO");
  std::printf(
      "  slow watcher: got %lld of %d steps, done after %.2f s (caught up from the store)\n",
      static_cast<long long>(received[0]), steps, finished_at[0]);
  session_context.TryCancel();
  coordinator.Stop(std::chrono::seconds(10));
  figures.reports_per_second = steps / report_seconds;
  figures.events_per_second = fast_events / fast_last;
  figures.ok = complete && received[0] == steps;
  return figures;
}

}  // namespace
