// Process groups for one rank: rendezvous through a c10d TCPStore served by rank 0, then groups for
// the world, this rank's CP group and its DP group — Gloo when the rank computes on the CPU, NCCL on
// a CUDA device (only in builds with RINGTRAIN_CUDA: nccl_group.h). Every collective is bounded by
// comm.timeout_seconds.
//
// A heartbeat thread bumps `heartbeat/<rank>` in the store every second, so that when a collective
// fails the survivors can name the rank that was lost (DiagnoseFailure) instead of reporting only a
// closed socket.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_COMM_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_COMM_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/statusor.h"
#include "worker/engine/parallel/mesh.h"

namespace ringtrain {

// A collective or transfer that failed: a lost peer, a closed connection, a timeout. The trainer
// reports these as UNAVAILABLE (the job may be retried elsewhere); any other exception out of the
// engine is a bug (INTERNAL).
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs `f` (issuing c10d work or waiting on it); whatever it throws becomes a CommError that starts
// with `what` ("ring attention: receive of K/V from cp rank 1 failed: ..."), LibTorch's backtrace
// left out.
template <typename F>
auto CommCall(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    throw CommError(what + " failed: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw CommError(what + " failed: " + e.what());
  }
}

struct RendezvousOptions {
  // Rank 0 serves the store on this address only (not every interface), so it must be an address
  // of rank 0's machine: the agent's --advertise-address.
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::chrono::milliseconds timeout{60000};
  c10::Device device = c10::Device(c10::kCPU);  // where this rank's tensors live
};

// Per-rank communication figures, accumulated until Reset. Written by the one training thread.
struct CommStats {
  double wait_seconds = 0;  // blocked waiting for transfers/collectives to finish
  int64_t bytes_sent = 0;   // payload bytes this rank sent (ring, all-gather, all-reduce input)
  // Time blocked on ring receives that were overlapped with a block's compute (alltoall): the part
  // of the ring transfers the compute did not hide. (Gloo's Work::isCompleted only turns true in
  // wait(), so whether a transfer finished early cannot be observed directly.)
  double ring_wait_seconds = 0;
  void Reset() { *this = CommStats{}; }
};

class Communicator {
 public:
  // Connects to (rank 0: serves, listening on master_addr alone) the store at
  // master_addr:master_port, waits for all ranks, and builds the groups; each Gloo group listens on
  // $RINGTRAIN_HOST_ADDRESS (loopback when unset), never a wildcard. UNAVAILABLE naming the address
  // when the rendezvous fails or times out, or rank 0 cannot listen there.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(const Mesh& mesh,
                                                              const RendezvousOptions& options);
  // Single-process variant for tests: ranks are threads sharing `store` (e.g. a HashStore).
  static std::unique_ptr<Communicator> CreateWithStore(const Mesh& mesh,
                                                       c10::intrusive_ptr<c10d::Store> store,
                                                       std::chrono::milliseconds timeout,
                                                       bool heartbeat);
  // Whether this build and machine can run on `device`: CUDA needs the CUDA build (RINGTRAIN_CUDA)
  // and a visible device of that index. FAILED_PRECONDITION naming the device otherwise.
  static absl::Status CheckDeviceSupported(const c10::Device& device);
  ~Communicator();

  const Mesh& mesh() const { return mesh_; }
  c10d::ProcessGroup& world() { return *world_; }
  c10d::ProcessGroup& cp_group() { return *cp_; }
  c10d::ProcessGroup& dp_group() { return *dp_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const c10::Device& device() const { return device_; }
  CommStats& stats() { return stats_; }

  // Waits for `work`, counting the time as communication wait. Throws CommError when it failed.
  void Wait(const c10::intrusive_ptr<c10d::Work>& work);

  // After a failed collective: which ranks stopped beating (checked over ~2.5 s), as a sentence
  // to append to the error, e.g. "lost peer: rank 2 (no heartbeat for 2.5 s)".
  std::string DiagnoseFailure();

  // Gathers `values` (same length on every rank) from all ranks to every rank: (world, n) doubles.
  // Throws CommError.
  std::vector<std::vector<double>> AllGatherDoubles(const std::vector<double>& values);

 private:
  Communicator(const Mesh& mesh, c10::intrusive_ptr<c10d::Store> store,
               std::chrono::milliseconds timeout, c10::Device device);
  void BuildGroups();
  void StartHeartbeat();

  Mesh mesh_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  c10::Device device_;
  c10::intrusive_ptr<c10d::ProcessGroup> world_, cp_, dp_;
  CommStats stats_;
  std::atomic<bool> stop_{false};
  std::thread heartbeat_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_COMM_H_
