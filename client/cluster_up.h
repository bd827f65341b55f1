// `ringctl up`: a whole ringtrain cluster on this machine in one command — a ringtrain-coordinator
// and N ringtrain-worker agents, each a child process in its own process group with its output in
// DIR/logs/<name>.log. It waits until the N workers are IDLE, then stays in the foreground until
// Ctrl-C (SIGINT) or SIGTERM, or until the coordinator dies; then it stops the workers, then the
// coordinator (SIGTERM, 5 s grace, SIGKILL), reaps them and exits.
//
// Exit statuses: 0 after a requested stop; 1 when a child died during start-up or the coordinator
// died later; 2 for bad flags or a missing binary; 3 when the workers were not IDLE within 60 s.
#ifndef RINGTRAIN_CLIENT_CLUSTER_UP_H_
#define RINGTRAIN_CLIENT_CLUSTER_UP_H_

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

struct UpFlags {
  int workers = 0;                         // required, >= 1
  std::string listen = "127.0.0.1:50051";  // the coordinator's --listen address
  std::string dir = "ringtrain-cluster";   // the database, the workers' work dirs and logs/
  int threads = 1;                         // per trainer (each worker's --threads)
  std::string data_root;                   // every worker's --data-root; empty: none
  std::string bin_dir;  // where the two binaries are; empty: beside ringctl's own executable
  double ready_timeout_seconds = 60;  // for the workers to become IDLE
};

// Adds the `up` subcommand to `app`; parsing fills `*flags`, which must outlive `app`.
CLI::App* AddUpCommand(CLI::App& app, UpFlags* flags);

// Runs the cluster until it is stopped; returns the exit status. Blocks SIGINT, SIGTERM and SIGCHLD
// in the calling thread (and so in every thread it starts) to take them synchronously: call it from
// the main thread before any other thread exists.
int RunUp(const UpFlags& flags);

// The address a client on this machine uses to reach a server listening on `listen`: a wildcard
// host (0.0.0.0, [::] or none) becomes 127.0.0.1. "0.0.0.0:50051" → "127.0.0.1:50051".
std::string LocalConnectAddress(const std::string& listen);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_CLUSTER_UP_H_
