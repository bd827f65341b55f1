// ringtrain-coordinator: the gRPC server that owns the worker pool, the job queue and the job
// store. Flags are described by --help. Stops cleanly on SIGINT or SIGTERM (in-flight streams get
// two seconds to finish; jobs in the store survive for the next start).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/grpc/credentials.h"
#include "common/grpc/server_util.h"
#include "common/log.h"
#include "common/metrics/metrics_server.h"
#include "common/version/version.h"
#include "coordinator/admission.h"
#include "coordinator/auth.h"
#include "coordinator/cluster.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/event_hub.h"
#include "coordinator/job_store.h"
#include "coordinator/service.h"

namespace {

struct Flags {
  std::string listen = "127.0.0.1:50051";
  std::string db = "./ringtrain.db";
  bool new_store = false;
  double worker_timeout_seconds = 10;
  double heartbeat_interval_seconds = 1;
  std::string rendezvous_ports = "29500-29999";
  int64_t pool_size_hint = 0;
  std::string metrics_address = "127.0.0.1:9460";
  double adopt_timeout_seconds = 20;
  double purge_lost_after_seconds = 600;
  double unschedulable_timeout_seconds = 600;
  double rank_start_timeout_seconds = 30;
  double records_timeout_seconds = 30;
  ringtrain::ServerTlsFiles tls;
  std::string client_token_file;
  std::string worker_token_file;
  bool insecure = false;
};

// The token check of one service: open without a file, else the file's tokens.
absl::StatusOr<ringtrain::TokenCheck> LoadTokens(
    const std::string& path, const char* flag,
    ringtrain::TokenCheck (*make)(std::vector<std::string>)) {
  if (path.empty()) return ringtrain::TokenCheck::Open();
  absl::StatusOr<std::vector<std::string>> tokens = ringtrain::ReadTokenFile(path, flag);
  if (!tokens.ok()) return tokens.status();
  return make(*std::move(tokens));
}

int Refuse(const absl::Status& status) {
  std::fprintf(stderr, "ringtrain-coordinator: %s\n", std::string(status.message()).c_str());
  return 2;
}

// SIGINT and SIGTERM: blocked in every thread, taken by sigwait in Run.
sigset_t StopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

bool ParsePortRange(const std::string& text, int* first, int* last) {
  std::vector<std::string> parts = absl::StrSplit(text, '-');
  return parts.size() == 2 && absl::SimpleAtoi(parts[0], first) && absl::SimpleAtoi(parts[1], last);
}

int Run(const Flags& flags) {
  using ringtrain::Cluster;
  ringtrain::ClusterOptions options;
  options.worker_timeout = absl::Seconds(flags.worker_timeout_seconds);
  options.heartbeat_interval = absl::Seconds(flags.heartbeat_interval_seconds);
  options.pool_size_hint = flags.pool_size_hint;
  options.adopt_timeout = absl::Seconds(flags.adopt_timeout_seconds);
  options.purge_lost_after = absl::Seconds(flags.purge_lost_after_seconds);
  options.unschedulable_timeout = absl::Seconds(flags.unschedulable_timeout_seconds);
  options.start_timeout = absl::Seconds(flags.rank_start_timeout_seconds);
  options.records_timeout = absl::Seconds(flags.records_timeout_seconds);
  if (!ParsePortRange(flags.rendezvous_ports, &options.rendezvous_port_first,
                      &options.rendezvous_port_last)) {
    std::fprintf(stderr,
                 "ringtrain-coordinator: --rendezvous-ports \"%s\" is not FIRST-LAST "
                 "(e.g. 29500-29999)\n",
                 flags.rendezvous_ports.c_str());
    return 2;
  }
  if (flags.heartbeat_interval_seconds <= 0 ||
      flags.worker_timeout_seconds <= 2 * flags.heartbeat_interval_seconds) {
    std::fprintf(stderr,
                 "ringtrain-coordinator: --worker-timeout (%g s) must exceed twice "
                 "--heartbeat-interval (%g s), which must be > 0\n",
                 flags.worker_timeout_seconds, flags.heartbeat_interval_seconds);
    return 2;
  }
  // Credentials before anything is opened: a bad file or an unprotected address ends the start.
  const ringtrain::ListenProtection protection{!flags.tls.cert.empty(),
                                               !flags.client_token_file.empty(),
                                               !flags.worker_token_file.empty(), flags.insecure};
  if (absl::Status s = ringtrain::CheckListenProtection(flags.listen, protection); !s.ok()) {
    return Refuse(s);
  }
  auto server_credentials = ringtrain::ServerCredentialsFromFiles(flags.tls);
  if (!server_credentials.ok()) return Refuse(server_credentials.status());
  auto job_auth = LoadTokens(flags.client_token_file, "--client-token-file",
                             &ringtrain::TokenCheck::ForJobService);
  if (!job_auth.ok()) return Refuse(job_auth.status());
  auto worker_auth = LoadTokens(flags.worker_token_file, "--worker-token-file",
                                &ringtrain::TokenCheck::ForWorkerService);
  if (!worker_auth.ok()) return Refuse(worker_auth.status());
  const bool fully_protected =
      protection.tls && protection.client_tokens && protection.worker_tokens;
  if (flags.insecure && !fully_protected && !ringtrain::IsLoopbackListenAddress(flags.listen)) {
    RT_LOG(Warning) << "--insecure: serving " << flags.listen << " to the network"
                    << (protection.tls ? "" : ", without TLS")
                    << (protection.client_tokens ? "" : ", without client tokens")
                    << (protection.worker_tokens ? "" : ", without join tokens")
                    << ": anyone who reaches it can do what those would have stopped";
  }

  const std::filesystem::path db_dir = std::filesystem::path(flags.db).parent_path();
  if (!db_dir.empty()) std::filesystem::create_directories(db_dir);

  ringtrain::JobStoreOptions store_options;
  store_options.new_store = flags.new_store;
  auto store = ringtrain::JobStore::Open(flags.db, ringtrain::Clock::Real(), store_options);
  if (!store.ok()) {  // damaged, missing or emptied: the message names the file and the fix
    std::fprintf(stderr, "ringtrain-coordinator: %s\n",
                 std::string(store.status().message()).c_str());
    return 1;
  }
  ringtrain::EventHub hub;
  auto cluster = Cluster::Create(store->get(), &hub, options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "ringtrain-coordinator: %s\n",
                 std::string(cluster.status().message()).c_str());
    return 1;
  }
  auto metrics = std::make_shared<ringtrain::CoordinatorMetrics>(cluster->get(), &hub);
  auto metrics_server = ringtrain::MetricsServer::Start(flags.metrics_address);
  if (!metrics_server.ok()) {
    std::fprintf(stderr, "ringtrain-coordinator: %s\n",
                 std::string(metrics_server.status().message()).c_str());
    return 1;
  }
  (*metrics_server)->Register(metrics);
  ringtrain::JobServiceImpl job_service(cluster->get(), store->get(), &hub, metrics.get(),
                                        *std::move(job_auth));
  ringtrain::WorkerServiceImpl worker_service(cluster->get(), metrics.get(),
                                              *std::move(worker_auth));

  const bool job_service_open = flags.client_token_file.empty();
  const bool worker_service_open = flags.worker_token_file.empty();
  ringtrain::EnableStandardServices();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(flags.listen, *server_credentials, &port);
  builder.SetMaxReceiveMessageSize(ringtrain::kMaxReceiveMessageBytes);  // admission.h
  builder.RegisterService(&job_service);
  builder.RegisterService(&worker_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr,
                 "ringtrain-coordinator: cannot listen on %s (address in use, or not "
                 "HOST:PORT?)\n",
                 flags.listen.c_str());
    return 1;
  }
  (*cluster)->Start();
  RT_LOG(Info) << "coordinator listening on " << flags.listen << " (port " << port << ", "
               << (protection.tls ? (flags.tls.client_ca.empty() ? "TLS" : "mutual TLS")
                                  : "plaintext")
               << ", client tokens " << (job_service_open ? "off" : "on") << ", join tokens "
               << (worker_service_open ? "off" : "on") << "), job store " << flags.db
               << ", metrics at http://" << (*metrics_server)->address() << "/metrics";

  const sigset_t stop_signals = StopSignals();
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  RT_LOG(Info) << "signal " << signal_number << ": shutting down";
  (*cluster)->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  metrics_server->reset();  // no scrape may outlive the cluster it reads
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Stop signals are taken by sigwait in Run; block them before any thread starts so that every
  // thread inherits the mask.
  const sigset_t stop_signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  CLI::App app{"ringtrain-coordinator: the worker pool, job queue and job store of ringtrain",
               "ringtrain-coordinator"};
  app.set_version_flag("--version", ringtrain::VersionLine("ringtrain-coordinator"));
  Flags flags;
  app.add_option("--listen", flags.listen, "gRPC address to serve on (HOST:PORT)")
      ->capture_default_str();
  app.add_option("--db", flags.db,
                 "SQLite job store (created at the first start; its stamp <db>.stamp records how "
                 "many jobs it has held)")
      ->capture_default_str();
  app.add_flag("--new-store", flags.new_store,
               "start although the store holds fewer jobs than its stamp recorded (missing: a "
               "new, empty one is created; emptied or older: taken as it is) or the stamp is "
               "unreadable; rewrites the stamp. For the one start after a deliberate reset, not "
               "for every start");
  app.add_option("--worker-timeout", flags.worker_timeout_seconds,
                 "seconds without a heartbeat before a worker is lost")
      ->capture_default_str();
  app.add_option("--heartbeat-interval", flags.heartbeat_interval_seconds,
                 "seconds between agent heartbeats")
      ->capture_default_str();
  app.add_option("--rendezvous-ports", flags.rendezvous_ports,
                 "TCP ports handed to jobs' rank 0 for the c10d store (FIRST-LAST)")
      ->capture_default_str();
  app.add_option("--pool-size-hint", flags.pool_size_hint,
                 "workers of a kind expected to register eventually; a submitted job larger than "
                 "both this and the registered pool is refused")
      ->capture_default_str();
  app.add_option("--adopt-timeout", flags.adopt_timeout_seconds,
                 "after a restart, seconds a running job waits for its agents to come back")
      ->capture_default_str();
  app.add_option("--purge-lost-after", flags.purge_lost_after_seconds,
                 "seconds after which a lost worker is dropped from the pool, `ringctl workers` "
                 "and the store (it must register again as a new worker)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--unschedulable-timeout", flags.unschedulable_timeout_seconds,
                 "seconds a queued or restarting job may wait while the pool cannot hold it at "
                 "all (more ranks than live workers of its kind, after workers were lost) before "
                 "it fails; jobs behind it start meanwhile")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--rank-start-timeout", flags.rank_start_timeout_seconds,
                 "seconds an agent has, after taking a rank's assignment, to report its trainer "
                 "started; past that its worker is declared lost and blamed for the failed run")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--records-timeout", flags.records_timeout_seconds,
                 "seconds a job whose ranks all exited 0 waits for step records the store lacks "
                 "(asked of every agent, which keep them in their work dirs) before it fails "
                 "naming the missing steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--metrics-address", flags.metrics_address,
                 "HOST:PORT serving Prometheus /metrics")
      ->capture_default_str();
  app.add_option("--tls-cert", flags.tls.cert,
                 "PEM certificate chain to serve gRPC over TLS (with --tls-key)");
  app.add_option("--tls-key", flags.tls.key, "PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", flags.tls.client_ca,
                 "PEM CA: clients and agents must present a certificate it signed (mutual TLS)");
  app.add_option("--client-token-file", flags.client_token_file,
                 "tokens JobService accepts (ringctl's), one per line; unset: JobService is open");
  app.add_option("--worker-token-file", flags.worker_token_file,
                 "join tokens WorkerService accepts (the agents'), one per line; unset: open");
  app.add_flag("--insecure", flags.insecure,
               "listen on a non-loopback address without TLS and both token files");
  CLI11_PARSE(app, argc, argv);
  return Run(flags);
}
