// Process groups for one rank: rendezvous through a c10d TCPStore served by rank 0, then groups for
// the world, this rank's CP group and its DP group — Gloo when the rank computes on the CPU, NCCL
// on a CUDA device (only in builds with RINGTRAIN_CUDA: nccl_group.h), or Gloo for CUDA ranks too
// when comm.backend = "gloo" (several ranks on one GPU, which NCCL refuses): tensors then go
// through host memory. Every collective is bounded by comm.timeout_seconds.
//
// The engine moves tensors only through this class's AllReduce / AllGather / AllToAll / SendRecv,
// which hide those differences: host staging for Gloo on a device, and a send/recv pair issued as
// one NCCL group (two ranks that each send before receiving would otherwise deadlock). NCCL runs on
// its own streams, ordered after the compute stream's work when issued; waiting orders the compute
// stream after the transfer, so a ring transfer issued before a block's compute overlaps it.
//
// A heartbeat thread bumps `heartbeat/<rank>` in the store every 500 ms, so that when a collective
// fails the survivors can name the rank that was lost (DiagnoseFailure) instead of reporting only a
// closed socket.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_COMM_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_COMM_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/statusor.h"
#include "common/config/choices.h"
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
  CommBackend backend = CommBackend::kAuto;     // comm.backend
  // Also build snapshot_group() (checkpoint.memory_interval).
  bool snapshot_group = false;
};

// A transfer or collective in flight, from one of Communicator's methods; finish it with
// Communicator::Wait. Holds the tensors c10d reads or writes until then, and, when the group moves
// device tensors through host memory, the copies back to the device.
class PendingWork {
 public:
  bool pending() const { return !works_.empty(); }

 private:
  friend class Communicator;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<std::shared_ptr<std::vector<at::Tensor>>> buffers_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back_;  // (destination, host source)
};

// Per-rank communication figures, accumulated until Reset. Written by the one training thread.
struct CommStats {
  double wait_seconds = 0;  // blocked waiting for transfers/collectives to finish
  int64_t bytes_sent = 0;   // payload bytes this rank sent (ring, all-gather, all-reduce input)
  // Time blocked on context-parallel attention transfers: of those overlapped with a block's
  // compute (alltoall), the part the compute did not hide; of those nothing overlaps (allgather,
  // the last dK/dV hop home, Ulysses' all-to-alls), all of it. (Gloo's Work::isCompleted only
  // turns true in wait(), so whether a transfer finished early cannot be observed directly.)
  double ring_wait_seconds = 0;
  // Ring attention's waits one by one, in call order: one entry at every point of the ring loop
  // that may wait (kv_exchange.h; 0 where nothing was pending), so every rank of a ring records
  // the same sequence of points. ExposedRingTransfer turns the ring's into its exposed transfer.
  std::vector<double> ring_waits;
  int64_t kv_blocks_sent = 0;   // ring attention's K/V blocks sent (forward and backward)
  int64_t ring_bytes_sent = 0;  // ring attention's K/V and dK/dV bytes (also in bytes_sent)
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
  // Healing in place: drops every group and the store (after a lost peer: work still queued on
  // them fails or times out first) and rendezvous again, as Create does, at `options`' address —
  // a new store for the new generation of the world, same mesh. The object stays the same, so
  // whoever holds it (the attention plan, the gradient path) keeps working; references to groups
  // taken before do not. UNAVAILABLE as Create.
  absl::Status Rejoin(const RendezvousOptions& options);
  // Single-process variant for tests: ranks are threads sharing `store` (e.g. a HashStore), on the
  // CPU with Gloo. `stage_through_host` runs the host-staging path Gloo takes for CUDA tensors
  // (copies to and from host buffers) on CPU tensors, so the CPU tests cover it.
  static std::unique_ptr<Communicator> CreateWithStore(const Mesh& mesh,
                                                       c10::intrusive_ptr<c10d::Store> store,
                                                       std::chrono::milliseconds timeout,
                                                       bool heartbeat,
                                                       bool stage_through_host = false);
  // Whether this build and machine can run on `device`: CUDA needs the CUDA build (RINGTRAIN_CUDA)
  // and a visible device of that index. FAILED_PRECONDITION naming the device otherwise.
  static absl::Status CheckDeviceSupported(const c10::Device& device);
  // Whether `backend` can serve ranks on `device`: nccl needs CUDA ranks and the CUDA build.
  // FAILED_PRECONDITION naming comm.backend and the device otherwise.
  static absl::Status CheckBackend(CommBackend backend, const c10::Device& device);
  ~Communicator();

  const Mesh& mesh() const { return mesh_; }
  c10d::ProcessGroup& world() { return *world_; }
  c10d::ProcessGroup& cp_group() { return *cp_; }
  c10d::ProcessGroup& dp_group() { return *dp_; }
  // FSDP (mesh().sharded) only: the shard × cp ranks of this replica, and this FSDP rank's
  // replicas. Built only when the mesh is sharded.
  c10d::ProcessGroup& fsdp_group() { return *fsdp_; }
  // Context parallelism by method (mesh().ulysses): this rank's Ulysses group (the ulysses
  // consecutive ranks of its cp group, in ulysses_rank order) and its ring (the cp ranks of the
  // same ulysses_rank, in ring_rank order). Ring attention alone: the ring is the cp group;
  // Ulysses alone: the Ulysses group is.
  c10d::ProcessGroup& ulysses_group() { return *ulysses_; }
  c10d::ProcessGroup& ring_group() { return *ring_; }
  c10d::ProcessGroup& replicate_group() { return *replicate_; }
  // The world again, always Gloo on host tensors, for in-memory snapshot copies
  // (worker/trainer/memory_snapshots.h) so they travel beside the training's collectives. Built
  // only with RendezvousOptions::snapshot_group.
  c10d::ProcessGroup& snapshot_group() { return *snapshot_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const c10::Device& device() const { return device_; }
  CommStats& stats() { return stats_; }

  // "nccl", "gloo" or "gloo (through host memory)": what the groups run on, for the log.
  std::string DescribeBackend() const;

  // Sum (or `op`) of `tensor` over `group`, in place once waited for.
  PendingWork AllReduce(c10d::ProcessGroup& group, at::Tensor& tensor,
                        c10d::ReduceOp op = c10d::ReduceOp::SUM);
  // The element-wise least of `values` (same length on every rank) over `group`, waited for.
  // Throws CommError.
  std::vector<double> MinOver(c10d::ProcessGroup& group, const std::vector<double>& values);
  // Every rank's `input` into `outputs` (one tensor per rank, like `input`), once waited for.
  PendingWork AllGather(c10d::ProcessGroup& group, std::vector<at::Tensor>& outputs,
                        const at::Tensor& input);
  // Every rank's `input` (n elements) into the flat `output` (group size × n), rank i's at i·n.
  PendingWork AllGatherInto(c10d::ProcessGroup& group, at::Tensor& output, const at::Tensor& input);
  // The flat `input` (group size × n elements) summed over the group; `output` (n) gets the sum's
  // slice of this rank (elements rank·n … rank·n + n − 1).
  PendingWork ReduceScatter(c10d::ProcessGroup& group, at::Tensor& output, const at::Tensor& input);
  // Equal splits along dim 0: slice j of `input` goes to rank j; `output` gets slice i from rank i.
  PendingWork AllToAll(c10d::ProcessGroup& group, at::Tensor& output, const at::Tensor& input);
  // Sends `send` to group rank `to` and receives `recv` (allocated, same shape) from `from`, as one
  // operation (an NCCL group on NCCL).
  PendingWork SendRecv(c10d::ProcessGroup& group, const at::Tensor& send, int to, at::Tensor& recv,
                       int from, int tag);
  // Point-to-point transfers as one operation: each (tensor, group rank) of `sends` sent, each of
  // `recvs` (allocated, the sender's shape) received; either may be empty. At most one transfer
  // per peer and direction with one `tag`.
  PendingWork Exchange(c10d::ProcessGroup& group,
                       const std::vector<std::pair<at::Tensor, int>>& sends,
                       const std::vector<std::pair<at::Tensor*, int>>& recvs, int tag);
  // Waits for `work` (then a no-op), counting the time as communication wait, and copies staged
  // results to their device tensors. Throws CommError when it failed.
  void Wait(PendingWork& work);

  // After a failed collective: which ranks stopped beating (checked over ~2.5 s), as a sentence
  // to append to the error, e.g. "lost peer: rank 2 (no heartbeat for 2.5 s)". `known`, checked
  // every 100 ms, ends the check early when it returns true: whoever is waiting already knows a
  // peer is gone (a survivor's heal instruction came), so the 2.5 s would only delay the heal.
  std::string DiagnoseFailure(const std::function<bool()>& known = {});

  // Gathers `values` (same length on every rank) from all ranks to every rank: (world, n) doubles.
  // Throws CommError.
  std::vector<std::vector<double>> AllGatherDoubles(const std::vector<double>& values);

 private:
  Communicator(const Mesh& mesh, c10::intrusive_ptr<c10d::Store> store,
               std::chrono::milliseconds timeout, c10::Device device, CommBackend backend);
  void BuildGroups();
  bool UsesNccl() const;
  // The tensor c10d sees: `t` itself, or (staging) a host copy of it.
  at::Tensor Stage(const at::Tensor& t) const;
  // A tensor for c10d to write into: `t` itself, or (staging) a host buffer copied to `t` at Wait.
  at::Tensor StageOutput(const at::Tensor& t, PendingWork& work) const;
  void StartHeartbeat();
  void StopHeartbeat();
  // The store at options' address (rank 0 serves it). Throws.
  static c10::intrusive_ptr<c10d::Store> ConnectStore(const Mesh& mesh,
                                                      const RendezvousOptions& options);

  Mesh mesh_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  c10::Device device_;
  CommBackend backend_;
  bool staged_ = false;  // Gloo for device tensors: every tensor goes through host memory
  bool with_snapshot_group_ = false;
  c10::intrusive_ptr<c10d::ProcessGroup> world_, cp_, dp_, fsdp_, replicate_, ulysses_, ring_,
      snapshot_;
  CommStats stats_;
  std::atomic<bool> stop_{false};
  std::thread heartbeat_;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_COMM_H_
