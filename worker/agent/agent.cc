#include "worker/agent/agent.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/device.h"
#include "common/grpc/client_util.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "worker/agent/device_probe.h"
#include "worker/agent/job_paths.h"
#include "worker/agent/step_records.h"

namespace ringtrain {
namespace {

constexpr std::chrono::milliseconds kDefaultHeartbeat{1000};  // if the coordinator sends none
constexpr std::chrono::seconds kStableSession{2};  // a session that lived this long resets backoff
constexpr absl::Duration kWriterStopWait = absl::Seconds(2);  // then the call is cancelled
constexpr std::chrono::seconds kShutdownDrain{5};  // after the grace, close regardless
constexpr absl::Duration kCloseWait = absl::Seconds(1);  // for the coordinator to end the stream
// After stop_deadline_, the call is cancelled even if a Write is stuck (a coordinator that does
// not read): Run() must return.
constexpr absl::Duration kForceStopAfter = absl::Seconds(1);

std::string Seconds(std::chrono::milliseconds d) {
  return absl::StrFormat("%.1f", static_cast<double>(d.count()) / 1000.0);
}

// Exponential backoff with +-20% jitter, capped at `max`.
class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max)
      : initial_(initial), max_(max), next_(initial) {}
  std::chrono::milliseconds Next() {
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    const auto delay = std::chrono::milliseconds(
        static_cast<int64_t>(static_cast<double>(next_.count()) * jitter(rng_)));
    next_ = std::min(next_ * 2, max_);
    return std::min(delay, max_);
  }
  void Reset() { next_ = initial_; }

 private:
  const std::chrono::milliseconds initial_;
  const std::chrono::milliseconds max_;
  std::chrono::milliseconds next_;
  std::mt19937 rng_{std::random_device{}()};
};

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

// The trainer must be an executable file; the error says how to get one.
absl::Status CheckTrainer(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("no trainer: pass --trainer PATH");
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer '", path, "' does not exist (", std::strerror(errno),
                     "); build ringtrain-trainer beside ringtrain-worker or pass --trainer PATH"));
  }
  if (!S_ISREG(st.st_mode) || access(path.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer '", path, "' is not an executable file; pass --trainer PATH to one"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> DeviceKind(absl::string_view device) {
  // The trainer's own parser, so the agent accepts exactly what its trainers will; an agent names
  // its CUDA device (cuda:N), it never means "whichever is current".
  const absl::StatusOr<DeviceSpec> spec = ParseDevice(device);
  if (!spec.ok() || (spec->type == DeviceType::kCuda && spec->index < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device '", device, "' is not valid; expected cpu or cuda:N (e.g. cuda:0)"));
  }
  return std::string(spec->type == DeviceType::kCpu ? "cpu" : "cuda");
}

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  RT_ASSIGN_OR_RETURN(std::string kind, DeviceKind(options.device));
  if (options.threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads ", options.threads, " is not valid; expected a whole number >= 1"));
  }
  if (options.coordinator.empty()) {
    return absl::InvalidArgumentError("--coordinator is empty; expected HOST:PORT");
  }
  if (options.advertise_address.empty()) {
    return absl::InvalidArgumentError("--advertise-address is empty; expected a host name or IP");
  }
  RT_RETURN_IF_ERROR(CheckTrainer(options.trainer_path));
  std::error_code ec;
  const std::filesystem::path work_dir = std::filesystem::absolute(options.work_dir, ec);
  if (!ec) std::filesystem::create_directories(work_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("--work-dir '", options.work_dir, "' cannot be created: ", ec.message()));
  }
  options.work_dir = work_dir.lexically_normal().string();
  if (options.work_dir.size() > 1 && options.work_dir.back() == '/') options.work_dir.pop_back();
  if (!options.data_root.empty()) {
    RT_ASSIGN_OR_RETURN(options.data_root, CanonicalRoot("--data-root", options.data_root, false));
  }
  if (options.checkpoint_root.empty()) options.checkpoint_root = options.work_dir + "/checkpoints";
  RT_ASSIGN_OR_RETURN(options.checkpoint_root,
                      CanonicalRoot("--checkpoint-root", options.checkpoint_root, true));
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
            return info.stopping ? LogServer::RankState::kStopping
                                 : LogServer::RankState::kRunning;
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

namespace {

// A call that failed because the coordinator could not be reached (or answered too late).
bool IsUnreachable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

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
  request.set_host_label(options_.host_label);
  request.set_address(options_.advertise_address);
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
    RT_LOG(Info) << "registered again as " << worker_id_ << " (was " << previous_worker_id_
                 << ")"
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
               << absl::StrFormat("%.1f GiB", device_info_.memory_bytes / 1073741824.0)
               << ", host " << options_.host_label << ", address " << options_.advertise_address
               << "; heartbeat every " << heartbeat_interval_.count() << " ms)";
  return absl::OkStatus();
}

grpc::Status Agent::RunSession(bool* opened) {
  grpc::ClientContext context;  // no deadline: the session lasts as long as the agent
  v1::AgentMessage hello;
  std::chrono::milliseconds interval;
  {
    absl::MutexLock lock(&mu_);
    if (stop_requested_) return grpc::Status(grpc::StatusCode::CANCELLED, "shutting down");
    call_context_ = &context;
    session_over_ = false;
    welcomed_ = false;
    outbox_.Rewind();  // what the last session wrote but never saw acknowledged goes again
    replies_.clear();  // the streams they answer ended with the last session
    hello.mutable_hello()->set_worker_id(worker_id_);
    hello.mutable_hello()->set_credential(credential_);
    interval = heartbeat_interval_;
  }
  std::unique_ptr<Stream> stream = stub_->Session(&context);
  if (stream->Write(hello)) {
    *opened = true;
    metrics_->SetConnected(true);
    std::thread writer;
    {
      absl::MutexLock lock(&mu_);
      RT_LOG(Info) << "session open with coordinator at " << options_.coordinator << " as worker "
                   << worker_id_ << " (" << outbox_.size()
                   << " messages to send that the coordinator has not acknowledged)";
      writer_running_ = true;
      writer = std::thread([&] { WriterLoop(stream.get(), &context, interval); });
    }
    v1::CoordinatorMessage message;
    while (stream->Read(&message)) {
      if (message.has_welcome()) {
        absl::MutexLock lock(&mu_);
        welcomed_ = true;  // the coordinator took the Hello: the outbox may go now
        writer_wakeup_ = true;
      } else if (message.has_ack()) {
        outbox_.Acknowledge(message.ack().seq());
        if (!message.ack().refused().empty()) {
          RT_LOG(Warning) << "the coordinator refused message " << message.ack().seq() << ": "
                          << message.ack().refused() << " (dropped)";
        }
      } else if (message.has_assignment()) {
        HandleAssignment(message.assignment());
      } else if (message.has_cancel()) {
        HandleCancel(message.cancel());
      } else if (message.has_log_request()) {
        log_server_.Handle(message.log_request());
      } else if (message.has_step_records_request()) {
        // Rare (a finished job whose store lacks steps) and one sequential read of one file.
        std::vector<v1::AgentMessage> answer =
            AnswerStepRecords(options_.work_dir, message.step_records_request());
        int64_t records = 0;
        for (const v1::AgentMessage& m : answer) records += m.step_records().record_json_size();
        RT_LOG(Info) << "the coordinator asked for steps "
                     << message.step_records_request().first_step() << "-"
                     << message.step_records_request().last_step() << " of "
                     << message.step_records_request().job_id() << " rank "
                     << message.step_records_request().rank() << ": sending " << records
                     << " records from this work dir";
        absl::MutexLock lock(&mu_);
        for (v1::AgentMessage& m : answer) replies_.push_back(std::move(m));
        writer_wakeup_ = true;
      } else {
        RT_LOG(Warning) << "ignoring a message of unknown kind from the coordinator";
      }
    }
    {
      absl::MutexLock lock(&mu_);
      session_over_ = true;
      writer_wakeup_ = true;
      // A Write stuck on flow control never returns by itself: cancelling the call fails it.
      if (!mu_.AwaitWithTimeout(absl::Condition(this, &Agent::WriterStopped), kWriterStopWait)) {
        context.TryCancel();
      }
    }
    writer.join();
    metrics_->SetConnected(false);
  }
  const grpc::Status status = stream->Finish();
  absl::MutexLock lock(&mu_);
  call_context_ = nullptr;
  return status;
}

bool Agent::WriterHasWork() const {
  return session_over_ || (welcomed_ && (outbox_.HasUnwritten() || !replies_.empty())) ||
         (stop_requested_ && !rank_.active());
}

void Agent::AwaitWriterWork(Clock::time_point deadline) {
  for (;;) {
    writer_wakeup_ = false;  // before looking, so a change after the look wakes the wait below
    if (WriterHasWork() || Clock::now() >= deadline) return;
    mu_.AwaitWithTimeout(absl::Condition(&writer_wakeup_),
                         absl::FromChrono(deadline - Clock::now()));
  }
}

void Agent::WakeWriter() {
  absl::MutexLock lock(&mu_);
  writer_wakeup_ = true;
}

void Agent::WriterLoop(Stream* stream, grpc::ClientContext* context,
                       std::chrono::milliseconds interval) {
  Clock::time_point next_heartbeat = Clock::now();  // the first one right after Hello
  for (;;) {
    v1::AgentMessage message;
    bool from_outbox = false;
    bool close = false;
    {
      absl::MutexLock lock(&mu_);
      AwaitWriterWork(next_heartbeat);
      const Clock::time_point now = Clock::now();
      if (session_over_) break;
      // Whether the rank has ended is read before the outbox: a rank's RankExit is queued before
      // it counts as ended, so an ended rank's exit is found below rather than left behind.
      const bool may_close = stop_requested_ && (!rank_.active() || now >= stop_deadline_);
      std::optional<v1::AgentMessage> queued;
      if (now >= next_heartbeat) {
        message.mutable_heartbeat();
        next_heartbeat = now + interval;
      } else if (welcomed_ && (queued = outbox_.NextToWrite())) {
        message = *std::move(queued);
        from_outbox = true;
      } else if (welcomed_ && !replies_.empty()) {
        message = std::move(replies_.front());
        replies_.pop_front();
      } else if (may_close) {
        close = true;
      } else {
        continue;
      }
    }
    if (close) {
      // Everything the coordinator should hear has been written: close our side and give the
      // coordinator a moment to end the stream (so it reads all of it), then cancel the call.
      stream->WritesDone();
      absl::MutexLock lock(&mu_);
      if (!mu_.AwaitWithTimeout(absl::Condition(&session_over_), kCloseWait)) context->TryCancel();
      writer_running_ = false;
      return;
    }
    if (!stream->Write(message)) break;  // the call is over; the reader sees it too
    if (message.has_heartbeat()) metrics_->HeartbeatSent();
    if (from_outbox) outbox_.MarkWritten(message.seq());  // kept until its Ack comes back
  }
  absl::MutexLock lock(&mu_);
  writer_running_ = false;
}

void Agent::QueueLocked(v1::AgentMessage message) {
  outbox_.Push(std::move(message));
  writer_wakeup_ = true;
}

}  // namespace ringtrain
