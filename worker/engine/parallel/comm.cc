#include "worker/engine/parallel/comm.h"

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/trainer_exit.h"
#ifdef RINGTRAIN_WITH_CUDA
#include "worker/engine/parallel/nccl_group.h"
#endif

namespace ringtrain {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHeartbeatPeriod = std::chrono::milliseconds(500);
constexpr auto kDiagnoseWindow = std::chrono::milliseconds(2500);

c10::intrusive_ptr<c10d::Backend> MakeGloo(const c10::intrusive_ptr<c10d::Store>& store,
                                           int64_t rank, int64_t size,
                                           std::chrono::milliseconds timeout,
                                           const std::string& host) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(host));
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, int(rank), int(size), options);
}

std::string GlooHostAddress() {
  const char* address = std::getenv("RINGTRAIN_HOST_ADDRESS");
  return address != nullptr && *address != '\0' ? address : "127.0.0.1";
}

std::string HeartbeatKey(int64_t rank) { return absl::StrCat("heartbeat/", rank); }

// A socket listening on host:port for rank 0's store to take over
// (TCPStoreOptions::masterListenFd): left to itself the store would listen on every interface, and
// the rendezvous should be reachable only where the other ranks are told to find it. Throws
// std::runtime_error naming the address.
int ListenOnMasterAddress(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    throw std::runtime_error(
        absl::StrCat("cannot resolve the rendezvous host ", host, ": ", gai_strerror(rc)));
  }
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    throw std::runtime_error(absl::StrCat(
        "rank 0 cannot listen on ", host, ":", port, " for the rendezvous: ", why,
        " (MASTER_ADDR must be an address of this machine: the agent's --advertise-address)"));
  }
  return fd;
}

}  // namespace

Communicator::Communicator(const Mesh& mesh, c10::intrusive_ptr<c10d::Store> store,
                           std::chrono::milliseconds timeout, c10::Device device,
                           CommBackend backend)
    : mesh_(mesh), store_(std::move(store)), timeout_(timeout), device_(device), backend_(backend) {
  staged_ = !device_.is_cpu() && !UsesNccl();
}

bool Communicator::UsesNccl() const {
#ifdef RINGTRAIN_WITH_CUDA
  return device_.is_cuda() && backend_ != CommBackend::kGloo;
#else
  return false;
#endif
}

absl::Status Communicator::CheckBackend(CommBackend backend, const c10::Device& device) {
  if (backend != CommBackend::kNccl) return absl::OkStatus();
#ifdef RINGTRAIN_WITH_CUDA
  if (device.is_cuda()) return absl::OkStatus();
#endif
  return absl::FailedPreconditionError(absl::StrCat(
      "comm.backend = \"nccl\" needs CUDA ranks in a CUDA build; this rank runs on '", device.str(),
      "'. HINT: comm.backend = \"auto\" (Gloo on the CPU) or --device=cuda:N"));
}

std::string Communicator::DescribeBackend() const {
  if (UsesNccl()) return "nccl";
  return staged_ ? "gloo (device tensors through host memory)" : "gloo";
}

absl::Status Communicator::CheckDeviceSupported(const c10::Device& device) {
  if (device.is_cpu()) return absl::OkStatus();
#ifdef RINGTRAIN_WITH_CUDA
  if (device.is_cuda()) {
    // Up front, so a rank without a usable GPU says so instead of failing deep in model building.
    const int64_t count = torch::cuda::is_available() ? int64_t(torch::cuda::device_count()) : 0;
    if (count == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("device '", device.str(),
                       "': no CUDA device is usable here (no NVIDIA GPU or driver "
                       "visible to this process). HINT: run on a GPU worker, or use --device=cpu"));
    }
    if (device.has_index() && device.index() >= count) {
      return absl::FailedPreconditionError(
          absl::StrCat("device '", device.str(), "' does not exist: this machine has ", count,
                       " CUDA device(s) (valid: cuda:0 … cuda:", count - 1, ")"));
    }
    return absl::OkStatus();
  }
#endif
  return absl::FailedPreconditionError(absl::StrCat(
      "device '", device.str(),
      "' is not supported by this build: CUDA devices need a build "
      "configured with -DRINGTRAIN_CUDA=ON against a CUDA LibTorch (collectives then use NCCL)"));
}

Communicator::~Communicator() { StopHeartbeat(); }

void Communicator::StopHeartbeat() {
  stop_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
  stop_ = false;
}

void Communicator::BuildGroups() {
  // One c10d::ProcessGroup per group (the 2.x API): keys under its own prefix of the store, and
  // one backend bound to the device type of this rank's tensors — NCCL for CUDA (nccl_group.cc),
  // Gloo for the CPU. Collectives are then the same calls for both.
  auto make = [&](const std::string& prefix, int64_t rank, int64_t size) {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
    auto group = c10::make_intrusive<c10d::ProcessGroup>(prefixed, int(rank), int(size));
#ifdef RINGTRAIN_WITH_CUDA
    if (UsesNccl()) {
      group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL,
                        MakeNcclBackend(prefixed, rank, size, timeout_));
      group->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
      return group;
    }
#endif
    // Gloo's TCP transport listens on the address other ranks reach this one at: the agent's
    // advertised address ($RINGTRAIN_HOST_ADDRESS), loopback when unset (every rank on one host).
    group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO,
                      MakeGloo(prefixed, rank, size, timeout_, GlooHostAddress()));
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    return group;
  };
  world_ = make("world", mesh_.rank, mesh_.world);
  cp_ = make(absl::StrCat("cp", mesh_.dp_rank()), mesh_.cp_rank(), mesh_.cp);
  dp_ = make(absl::StrCat("dp", mesh_.cp_rank()), mesh_.dp_rank(), mesh_.dp);
  ulysses_ = ring_ = cp_;
  if (mesh_.ulysses > 1 && mesh_.ulysses < mesh_.cp) {
    ulysses_ = make(absl::StrCat("ulysses", mesh_.dp_rank(), "_", mesh_.ring_rank()),
                    mesh_.ulysses_rank(), mesh_.ulysses);
  }
  if (mesh_.ulysses > 1 && mesh_.ring() > 1) {
    ring_ = make(absl::StrCat("ring", mesh_.dp_rank(), "_", mesh_.ulysses_rank()),
                 mesh_.ring_rank(), mesh_.ring());
  }
  if (mesh_.sharded) {
    fsdp_ =
        make(absl::StrCat("fsdp", mesh_.replicate_rank()), mesh_.fsdp_rank(), mesh_.fsdp_size());
    replicate_ = make(absl::StrCat("replicate", mesh_.fsdp_rank()), mesh_.replicate_rank(),
                      mesh_.replicate());
  }
  if (with_snapshot_group_) {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("snapshot", store_);
    snapshot_ =
        c10::make_intrusive<c10d::ProcessGroup>(prefixed, int(mesh_.rank), int(mesh_.world));
    snapshot_->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO,
                          MakeGloo(prefixed, mesh_.rank, mesh_.world, timeout_, GlooHostAddress()));
    snapshot_->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
  }
}

void Communicator::StartHeartbeat() {
  store_->set(HeartbeatKey(mesh_.rank), std::vector<uint8_t>{'0'});
  heartbeat_ = std::thread([this] {
    while (!stop_) {
      try {
        store_->add(HeartbeatKey(mesh_.rank), 1);
      } catch (const std::exception&) {
        return;  // the store is gone (rank 0 ended); the main thread reports it
      }
      for (auto slept = std::chrono::milliseconds(0); slept < kHeartbeatPeriod && !stop_;
           slept += std::chrono::milliseconds(50)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  });
}

c10::intrusive_ptr<c10d::Store> Communicator::ConnectStore(const Mesh& mesh,
                                                           const RendezvousOptions& options) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(options.master_port);
  store_options.isServer = mesh.rank == 0;
  store_options.numWorkers = static_cast<size_t>(mesh.world);
  store_options.waitWorkers = true;
  store_options.timeout = options.timeout;
  // The store takes the socket over (and closes it) whether it is the libuv backend or not.
  if (mesh.rank == 0) {
    store_options.masterListenFd = ListenOnMasterAddress(options.master_addr, options.master_port);
  }
  return c10::make_intrusive<c10d::TCPStore>(options.master_addr, store_options);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    const Mesh& mesh, const RendezvousOptions& options) {
  const progress::ScopedPhase waiting(progress::Phase::kWait);  // for every rank to arrive
  try {
    auto comm = std::unique_ptr<Communicator>(new Communicator(
        mesh, ConnectStore(mesh, options), options.timeout, options.device, options.backend));
    comm->with_snapshot_group_ = options.snapshot_group;
#ifdef RINGTRAIN_WITH_CUDA
    if (comm->UsesNccl()) {
      RT_LOG(Info) << "collectives: NCCL " << NcclVersion();
    }
#endif
    if (comm->staged_) {
      RT_LOG(Info) << "collectives: Gloo, " << options.device.str()
                   << " tensors staged through host memory (comm.backend = \"gloo\")";
    }
    comm->BuildGroups();
    comm->StartHeartbeat();
    return comm;
  } catch (const std::exception& e) {
    return MarkPeerLost(absl::UnavailableError(
        absl::StrFormat("rendezvous at %s:%d failed for %s: %s", options.master_addr,
                        options.master_port, mesh.Describe(), e.what())));
  }
}

absl::Status Communicator::Rejoin(const RendezvousOptions& options) {
  const progress::ScopedPhase waiting(progress::Phase::kWait);
  StopHeartbeat();
  // Groups before the store they were built on; each waits for its queued work to end.
  world_ = cp_ = dp_ = fsdp_ = replicate_ = ulysses_ = ring_ = snapshot_ = {};
  store_ = {};
  try {
    store_ = ConnectStore(mesh_, options);
    timeout_ = options.timeout;
    with_snapshot_group_ = options.snapshot_group;
    BuildGroups();
    StartHeartbeat();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return MarkPeerLost(absl::UnavailableError(
        absl::StrFormat("rendezvous again at %s:%d failed for %s: %s", options.master_addr,
                        options.master_port, mesh_.Describe(), e.what())));
  }
}

std::unique_ptr<Communicator> Communicator::CreateWithStore(const Mesh& mesh,
                                                            c10::intrusive_ptr<c10d::Store> store,
                                                            std::chrono::milliseconds timeout,
                                                            bool heartbeat,
                                                            bool stage_through_host) {
  auto comm = std::unique_ptr<Communicator>(new Communicator(
      mesh, std::move(store), timeout, c10::Device(c10::kCPU), CommBackend::kGloo));
  comm->staged_ = stage_through_host;
  comm->BuildGroups();
  if (heartbeat) comm->StartHeartbeat();
  return comm;
}

at::Tensor Communicator::Stage(const at::Tensor& t) const {
  // A copy even on the CPU (the tests' stand-in for a device), so the path is the same.
  return staged_ ? t.to(t.options().device(c10::kCPU), /*non_blocking=*/false, /*copy=*/true)
                       .contiguous()
                 : t;
}

at::Tensor Communicator::StageOutput(const at::Tensor& t, PendingWork& work) const {
  if (!staged_) return t;
  at::Tensor host = at::empty(t.sizes(), t.options().device(c10::kCPU));
  work.copy_back_.emplace_back(t, host);
  return host;
}

namespace {
std::shared_ptr<std::vector<at::Tensor>> Buffer(std::vector<at::Tensor> tensors) {
  return std::make_shared<std::vector<at::Tensor>>(std::move(tensors));
}
}  // namespace

PendingWork Communicator::AllReduce(c10d::ProcessGroup& group, at::Tensor& tensor,
                                    c10d::ReduceOp op) {
  PendingWork work;
  auto buffer = Buffer({staged_ ? StageOutput(tensor, work) : tensor});
  if (staged_) (*buffer)[0].copy_(tensor);
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  work.works_.push_back(group.allreduce(*buffer, options));
  work.buffers_.push_back(std::move(buffer));
  return work;
}

std::vector<double> Communicator::MinOver(c10d::ProcessGroup& group,
                                          const std::vector<double>& values) {
  at::Tensor t = torch::tensor(values, torch::kFloat64).to(device_);
  PendingWork work = CommCall("all-reduce (min) of per-rank figures",
                              [&] { return AllReduce(group, t, c10d::ReduceOp::MIN); });
  Wait(work);
  const at::Tensor least = t.cpu();
  return {least.data_ptr<double>(), least.data_ptr<double>() + least.numel()};
}

PendingWork Communicator::AllGather(c10d::ProcessGroup& group, std::vector<at::Tensor>& outputs,
                                    const at::Tensor& input) {
  PendingWork work;
  auto in = Buffer({Stage(input)});
  std::vector<at::Tensor> staged_outputs;
  for (at::Tensor& o : outputs) staged_outputs.push_back(StageOutput(o, work));
  auto out = std::make_shared<std::vector<std::vector<at::Tensor>>>(
      std::vector<std::vector<at::Tensor>>{std::move(staged_outputs)});
  work.works_.push_back(group.allgather(*out, *in));
  work.buffers_.push_back(std::move(in));
  work.buffers_.push_back(Buffer((*out)[0]));
  return work;
}

PendingWork Communicator::AllGatherInto(c10d::ProcessGroup& group, at::Tensor& output,
                                        const at::Tensor& input) {
  PendingWork work;
  auto buffers = Buffer({StageOutput(output, work), Stage(input)});
  work.works_.push_back(group._allgather_base((*buffers)[0], (*buffers)[1]));
  work.buffers_.push_back(std::move(buffers));
  return work;
}

PendingWork Communicator::ReduceScatter(c10d::ProcessGroup& group, at::Tensor& output,
                                        const at::Tensor& input) {
  PendingWork work;
  auto buffers = Buffer({StageOutput(output, work), Stage(input)});
  work.works_.push_back(group._reduce_scatter_base((*buffers)[0], (*buffers)[1]));
  work.buffers_.push_back(std::move(buffers));
  return work;
}

PendingWork Communicator::AllToAll(c10d::ProcessGroup& group, at::Tensor& output,
                                   const at::Tensor& input) {
  PendingWork work;
  auto buffers = Buffer({StageOutput(output, work), Stage(input)});
  std::vector<int64_t> equal_splits;
  work.works_.push_back(
      group.alltoall_base((*buffers)[0], (*buffers)[1], equal_splits, equal_splits));
  work.buffers_.push_back(std::move(buffers));
  return work;
}

PendingWork Communicator::SendRecv(c10d::ProcessGroup& group, const at::Tensor& send, int to,
                                   at::Tensor& recv, int from, int tag) {
  return Exchange(group, {{send, to}}, {{&recv, from}}, tag);
}

PendingWork Communicator::Exchange(c10d::ProcessGroup& group,
                                   const std::vector<std::pair<at::Tensor, int>>& sends,
                                   const std::vector<std::pair<at::Tensor*, int>>& recvs, int tag) {
  PendingWork work;
  if (sends.empty() && recvs.empty()) return work;
  std::vector<std::shared_ptr<std::vector<at::Tensor>>> send_buffers, recv_buffers;
  for (const auto& [tensor, to] : sends) send_buffers.push_back(Buffer({Stage(tensor)}));
  for (const auto& [tensor, from] : recvs) {
    recv_buffers.push_back(Buffer({StageOutput(*tensor, work)}));
  }
  // On NCCL one group: each rank's send waits for its peer's receive, so separate calls can
  // deadlock when both ranks of a pair send first.
  if (UsesNccl()) group.startCoalescing(c10::DeviceType::CUDA);
  for (size_t i = 0; i < sends.size(); ++i) {
    auto w = group.send(*send_buffers[i], sends[i].second, tag);
    if (!UsesNccl()) work.works_.push_back(std::move(w));
  }
  for (size_t i = 0; i < recvs.size(); ++i) {
    auto w = group.recv(*recv_buffers[i], recvs[i].second, tag);
    if (!UsesNccl()) work.works_.push_back(std::move(w));
  }
  if (UsesNccl()) work.works_.push_back(group.endCoalescing(c10::DeviceType::CUDA));
  for (auto& b : send_buffers) work.buffers_.push_back(std::move(b));
  for (auto& b : recv_buffers) work.buffers_.push_back(std::move(b));
  return work;
}

void Communicator::Wait(PendingWork& work) {
  const progress::ScopedPhase waiting(progress::Phase::kWait);  // blocked on peers, not stuck
  const auto start = Clock::now();
  auto add_wait = [&] {
    stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - start).count();
  };
  try {
    for (auto& w : work.works_) w->wait(timeout_);
    for (auto& [destination, host] : work.copy_back_) destination.copy_(host);
  } catch (const c10::Error& e) {
    add_wait();
    work = PendingWork{};
    throw CommError(e.what_without_backtrace());
  } catch (const std::exception& e) {
    add_wait();
    work = PendingWork{};
    throw CommError(e.what());
  }
  add_wait();
  work = PendingWork{};
}

std::string Communicator::DiagnoseFailure(const std::function<bool()>& known) {
  auto read_all = [&]() {
    std::map<int64_t, std::string> beats;
    for (int64_t r = 0; r < mesh_.world; ++r) {
      if (r == mesh_.rank) continue;
      const auto value = store_->get(HeartbeatKey(r));
      beats[r] = std::string(value.begin(), value.end());
    }
    return beats;
  };
  try {
    const auto before = read_all();
    const auto start = Clock::now();
    while (Clock::now() - start < kDiagnoseWindow) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (known && known()) {
        return absl::StrFormat("lost peer (told after %.1f s, before the heartbeat check ended)",
                               std::chrono::duration<double>(Clock::now() - start).count());
      }
    }
    const auto after = read_all();
    std::vector<std::string> lost;
    for (const auto& [r, beat] : before) {
      if (after.at(r) == beat) lost.push_back(absl::StrCat("rank ", r));
    }
    if (lost.empty()) return "every peer is still alive (the failure was not a lost peer)";
    return absl::StrFormat("lost peer: %s (no heartbeat for %.1f s)", absl::StrJoin(lost, ", "),
                           std::chrono::duration<double>(kDiagnoseWindow).count());
  } catch (const std::exception& e) {
    return "lost peer: rank 0 (it serves the rendezvous store, which is unreachable)";
  }
}

std::vector<std::vector<double>> Communicator::AllGatherDoubles(const std::vector<double>& values) {
  const at::Tensor mine = torch::tensor(values, torch::kFloat64).to(device_);
  std::vector<at::Tensor> outputs;
  for (int64_t r = 0; r < mesh_.world; ++r) outputs.push_back(torch::empty_like(mine));
  PendingWork work =
      CommCall("all-gather of per-rank figures", [&] { return AllGather(*world_, outputs, mine); });
  Wait(work);
  std::vector<std::vector<double>> result;
  for (const auto& gathered : outputs) {
    const at::Tensor t = gathered.cpu();
    result.emplace_back(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  return result;
}

}  // namespace ringtrain
