// The agent's life: Create, Shutdown, and Run — register with the coordinator, then open sessions
// (agent_session.cc) one after another, with backoff and a fresh channel after a failure, until
// Shutdown. (The writer of a session: agent_writer.cc; the ranks: agent_ranks.cc.)
#include "worker/agent/agent.h"

#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/device.h"
#include "common/grpc/client_util.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "worker/agent/backoff.h"
#include "worker/agent/device_probe.h"

namespace ringtrain {
namespace {

constexpr std::chrono::milliseconds kDefaultHeartbeat{1000};  // if the coordinator sends none
constexpr std::chrono::seconds kStableSession{2};  // a session that lived this long resets backoff
constexpr std::chrono::seconds kShutdownDrain{5};  // after the grace, close regardless
// After stop_deadline_, the call is cancelled even if a Write is stuck (a coordinator that does
// not read): Run() must return.
constexpr absl::Duration kForceStopAfter = absl::Seconds(1);

std::string Seconds(std::chrono::milliseconds d) {
  return absl::StrFormat("%.1f", static_cast<double>(d.count()) / 1000.0);
}

// A channel of its own to the coordinator. Two gRPC defaults matter here (grpc 1.51):
// - GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is also the connect timeout: the deadline of every connection
//   attempt (TCP connect, TLS handshake, the server's HTTP/2 SETTINGS) is at least that far from
//   when the attempt starts. Set to the agent's 200 ms, as it was, a TLS attempt never finished in
//   time once its channel had failed: "tcp handshaker shutdown", "Handshake read failed",
//   "connection attempt timed out before receiving SETTINGS frame", for ever, while plaintext
//   attempts (no handshake) finished first. So it keeps its default (20 s).
// - Channels with equal arguments share subchannels (and with them the connection backoff) through
//   the global pool: a channel made to replace a failed one would inherit its backoff. A local
//   pool makes each channel start afresh; the agent's own backoff paces the attempts.
std::shared_ptr<grpc::Channel> MakeChannel(const AgentOptions& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return ringtrain::MakeChannel(options.coordinator, options.security, args);
}

// A call that failed because the coordinator could not be reached (or answered too late).
bool IsUnreachable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  RT_ASSIGN_OR_RETURN(std::string kind, DeviceKind(options.device));
  RT_ASSIGN_OR_RETURN(options, CheckAgentOptions(std::move(options)));
  // A device that cannot be described is no reason to refuse work: the agent registers it as
  // "unknown (why)" and its trainers fail on their own if the device is really not there.
  const DeviceSpec device = *ParseDevice(options.device);  // DeviceKind accepted it
  const absl::StatusOr<DeviceInfo> probed = ProbeDevice(device);
  if (!probed.ok()) {
    RT_LOG(Warning) << probed.status().message() << "; registering it as unknown";
  }
  return std::unique_ptr<Agent>(
      new Agent(std::move(options), std::move(kind), RegisteredDeviceInfo(device, probed)));
}

Agent::Agent(AgentOptions options, std::string device_kind, DeviceInfo device_info)
    : options_(std::move(options)),
      device_kind_(std::move(device_kind)),
      device_info_(std::move(device_info)),
      channel_(MakeChannel(options_)),
      stub_(v1::WorkerService::NewStub(channel_)),
      metrics_(std::make_shared<AgentMetrics>()),
      outbox_(options_.max_buffered),
      rank_(&outbox_, metrics_.get(), [this] { WakeWriter(); }),
      log_server_(
          options_.work_dir,
          [this](const std::string& job_id, int rank) {
            const RankSlot::Info info = rank_.info();
            if (!info.active || info.job_id != job_id || info.rank != rank) {
              return LogServer::RankState::kNotRunning;
            }
            return info.stopping ? LogServer::RankState::kStopping : LogServer::RankState::kRunning;
          },
          [this](v1::AgentMessage message) {
            absl::MutexLock lock(&mu_);
            replies_.push_back(std::move(message));
            writer_wakeup_ = true;
          }) {}

Agent::~Agent() {
  Shutdown();
  if (force_stop_thread_.joinable()) force_stop_thread_.join();
  rank_.Release();  // outside mu_: the rank's on_exit wakes the writer, which takes mu_
}

std::string Agent::worker_id() {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

bool Agent::TakeOrphanPending() {
  absl::MutexLock lock(&mu_);
  const bool pending = orphan_pending_;
  orphan_pending_ = false;
  return pending;
}

bool Agent::StopRequested() {
  absl::MutexLock lock(&mu_);
  return stop_requested_;
}

void Agent::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (stop_requested_) return;
  stop_requested_ = true;
  stop_deadline_ = Clock::now() + options_.cancel_grace + kShutdownDrain;
  writer_wakeup_ = true;  // it may close once no rank runs
  const bool rank_active = rank_.active();
  RT_LOG(Info) << "shutting down" << (rank_active ? ": cancelling the running trainer" : "");
  if (rank_active) rank_.Cancel(options_.cancel_grace);
  if (call_context_ != nullptr && !writer_running_) call_context_->TryCancel();
  if (running_) force_stop_thread_ = std::thread([this] { ForceStopLoop(); });
}

void Agent::NewChannel() {
  stub_.reset();
  channel_ = MakeChannel(options_);
  stub_ = v1::WorkerService::NewStub(channel_);
}

void Agent::ForceStopLoop() {
  absl::MutexLock lock(&mu_);
  const absl::Duration wait = absl::FromChrono(stop_deadline_ - Clock::now()) + kForceStopAfter;
  if (!mu_.AwaitWithTimeout(absl::Condition(this, &Agent::RunReturned), wait) &&
      call_context_ != nullptr) {
    RT_LOG(Warning) << "the session did not close in time; cancelling it";
    call_context_->TryCancel();
  }
}

bool Agent::SleepUnlessStopped(std::chrono::milliseconds delay) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stop_requested_), absl::FromChrono(delay));
  return !stop_requested_;
}

absl::Status Agent::Run() {
  Backoff backoff(options_.initial_backoff, options_.max_backoff);
  const std::string where = "coordinator at " + options_.coordinator;
  absl::Status result;
  {
    absl::MutexLock lock(&mu_);
    running_ = true;
  }
  RT_LOG(Info) << "worker agent: " << where << ", device " << options_.device << ", work dir "
               << options_.work_dir << ", trainer " << options_.trainer_path << ", "
               << options_.threads << " threads per trainer";
  while (!StopRequested()) {
    if (worker_id().empty()) {
      const absl::Status registered = Register();
      if (registered.code() == absl::StatusCode::kInvalidArgument ||
          registered.code() == absl::StatusCode::kUnauthenticated) {
        result = registered;  // the coordinator refuses this agent: retrying will not help
        Shutdown();
        break;
      }
      if (registered.ok() && TakeOrphanPending()) OrphanRank();  // no job wants our rank
      if (!registered.ok()) {
        if (StopRequested()) break;
        const std::chrono::milliseconds delay = backoff.Next();
        RT_LOG(Warning) << registered.message() << " (retrying in " << Seconds(delay) << " s)";
        SleepUnlessStopped(delay);
        if (IsUnreachable(registered.code())) NewChannel();
        continue;
      }
    }
    const Clock::time_point started = Clock::now();
    bool opened = false;
    const grpc::Status ended = RunSession(&opened);
    if (StopRequested()) break;
    if (Clock::now() - started >= kStableSession) backoff.Reset();
    const std::chrono::milliseconds delay = backoff.Next();
    if (ended.error_code() == grpc::StatusCode::NOT_FOUND ||
        ended.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      RT_LOG(Warning) << where
                      << (ended.error_code() == grpc::StatusCode::NOT_FOUND
                              ? " does not know worker "
                              : " refused the credential of worker ")
                      << worker_id() << " (" << ended.error_message()
                      << "); registering again, asking for the same id and the rank back";
      {
        absl::MutexLock lock(&mu_);
        previous_worker_id_ = worker_id_;
        worker_id_.clear();
      }
      continue;  // the coordinator is up: register again now
    } else {
      std::string trainer;
      if (const RankSlot::Info rank = rank_.info(); rank.active) {
        trainer = absl::StrCat("; job ", rank.job_id, " rank ", rank.rank, " keeps running");
      }
      RT_LOG(Warning) << (opened ? "session ended: " : "") << FromGrpcStatus(ended, where).message()
                      << trainer << " (reconnecting in " << Seconds(delay) << " s)";
    }
    SleepUnlessStopped(delay);
    NewChannel();  // the session broke: the next attempt starts from a fresh connection
  }

  rank_.AwaitEnd(absl::FromChrono(options_.cancel_grace) + absl::Seconds(5));
  {
    absl::MutexLock lock(&mu_);
    running_ = false;
  }
  rank_.Release();  // outside mu_: the rank's on_exit wakes the writer, which takes mu_
  RT_LOG(Info) << "worker agent stopped";
  return result;
}

absl::Status Agent::Register() {
  v1::RegisterRequest request;
  request.set_device_kind(device_kind_);
  request.set_device(options_.device);
  request.set_device_name(device_info_.name);
  request.set_device_memory_bytes(device_info_.memory_bytes);
  request.set_checkpoint_root(options_.checkpoint_root);
  request.set_host_label(options_.host_label);
  request.set_address(options_.advertise_address);
  request.set_requested_worker_id(options_.worker_id);
  {
    absl::MutexLock lock(&mu_);
    request.set_previous_worker_id(previous_worker_id_);
    if (!previous_worker_id_.empty()) request.set_previous_credential(credential_);
    // The last rank, running or ended while the coordinator was away, is asked back: its job
    // may still need its records and its exit (a finished job just declines).
    const RankSlot::Info last = rank_.info();
    if (!previous_worker_id_.empty() && !last.job_id.empty()) {
      request.set_running_job_id(last.job_id);
      request.set_running_rank(last.rank);
      request.set_running_attempt(last.attempt);
    }
  }
  v1::RegisterResponse response;
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(options_.register_timeout));
  {
    absl::MutexLock lock(&mu_);
    if (stop_requested_) return absl::CancelledError("the agent is shutting down");
    call_context_ = &context;
  }
  const grpc::Status status = stub_->Register(&context, request, &response);
  absl::MutexLock lock(&mu_);
  call_context_ = nullptr;
  const std::string where = "coordinator at " + options_.coordinator;
  if (!status.ok()) return FromGrpcStatus(status, where);
  if (response.worker_id().empty()) {
    return absl::UnavailableError(where + " answered Register without a worker id");
  }
  worker_id_ = response.worker_id();
  credential_ = response.credential();
  if (!previous_worker_id_.empty()) {
    // Back after a coordinator restart: keep the rank and the unacknowledged messages only if
    // the coordinator took the rank back (they are written again on the next session: the
    // coordinator takes each step and the exit once); otherwise nobody would collect them.
    orphan_pending_ = !response.rank_adopted();
    RT_LOG(Info) << "registered again as " << worker_id_ << " (was " << previous_worker_id_ << ")"
                 << (request.running_job_id().empty() ? ""
                     : response.rank_adopted()
                         ? absl::StrCat("; job ", request.running_job_id(), " rank ",
                                        request.running_rank(), " re-adopted")
                         : absl::StrCat("; job ", request.running_job_id(), " rank ",
                                        request.running_rank(), " not wanted: stopping it"));
    previous_worker_id_.clear();
  }
  heartbeat_interval_ = response.heartbeat_interval_ms() > 0
                            ? std::chrono::milliseconds(response.heartbeat_interval_ms())
                            : kDefaultHeartbeat;
  RT_LOG(Info) << "registered with " << where << " as worker " << worker_id_ << " (device "
               << options_.device << " " << device_info_.name << ", "
               << absl::StrFormat("%.1f GiB", device_info_.memory_bytes / 1073741824.0) << ", host "
               << options_.host_label << ", address " << options_.advertise_address
               << "; heartbeat every " << heartbeat_interval_.count() << " ms)";
  return absl::OkStatus();
}
}  // namespace ringtrain
