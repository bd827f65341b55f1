#include "tests/e2e/load_round.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>

namespace ringtrain::testing {
namespace {

using Clock = std::chrono::steady_clock;
using Deadline = std::chrono::system_clock::time_point;

// Problems past this many are counted, not listed: one broken fan-out would otherwise print a line
// per watcher.
constexpr size_t kMaxProblemLines = 25;
constexpr int kListPageSize = 25;  // small, so a hundred queued jobs take several pages
constexpr int kCancelThreads = 8;
// The gate job's steps: more than it can run before it is cancelled.
constexpr int kGateSteps = 100000;

class Problems {
 public:
  void Add(const std::string& line) {
    if (lines_.size() < kMaxProblemLines) {
      lines_.push_back(line);
    } else {
      ++more_;
    }
  }
  std::vector<std::string> Take() {
    if (more_ > 0) lines_.push_back("... and " + std::to_string(more_) + " more problems");
    return std::move(lines_);
  }

 private:
  std::vector<std::string> lines_;
  int more_ = 0;
};

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// At most `seconds` from now, and never past the round's deadline.
Deadline Within(double seconds, Deadline round_deadline) {
  return std::min(round_deadline,
                  std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
}

double SecondsLeft(Deadline round_deadline) {
  return std::max(
      0.0,
      std::chrono::duration<double>(round_deadline - std::chrono::system_clock::now()).count());
}

bool IsFinal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

// The debug config as a job of `steps` steps on dp 1 × cp ranks.
std::vector<std::string> JobOverrides(const LoadRoundOptions& options) {
  return {"parallelism.data_parallel_replicate_degree=1",
          "parallelism.context_parallel_degree=" + std::to_string(options.cp),
          "training.steps=" + std::to_string(options.steps),
          "lr_scheduler.warmup_steps=" + std::to_string(std::min(10, options.steps / 2)),
          "metrics.log_freq=1000"};
}

// A gauge without labels from the coordinator's /metrics page; -1 when unread.
int64_t Gauge(const LocalCluster& cluster, const std::string& name) {
  const std::string page = HttpGet(cluster.coordinator_metrics(), "/metrics");
  const size_t at = page.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atoll(page.c_str() + at + name.size() + 2);
}

// Whether the coordinator counts `watchers` open streams within 60 s. Polled every 100 ms: each
// poll renders the whole /metrics page, and the coordinator under test should not be kept busy.
bool AllSubscribed(const LocalCluster& cluster, int watchers, Deadline round_deadline) {
  const Deadline until = Within(60, round_deadline);
  while (Gauge(cluster, "ringtrain_coordinator_watchers") < watchers) {
    if (std::chrono::system_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

struct WatcherLog {
  std::vector<v1::JobEvent> events;
  grpc::Status status;
  int reopened = 0;                // streams that could not be opened and were tried again
  std::string open_error;          // why the first of them failed
  std::atomic<bool> ended{false};  // set after `status`, so a reader that sees it may read status
};

// Why watchers are missing from the coordinator's count: the first stream that already ended, and
// how many did.
std::string EndedEarly(const std::vector<WatcherLog>& logs) {
  int ended = 0;
  std::string first;
  for (size_t w = 0; w < logs.size(); ++w) {
    if (!logs[w].ended.load()) continue;
    if (ended++ == 0) {
      first = "; watcher " + std::to_string(w) + " ended after " +
              std::to_string(logs[w].events.size()) + " events with " +
              std::to_string(logs[w].status.error_code()) + " \"" + logs[w].status.error_message() +
              "\"";
    }
  }
  return std::to_string(ended) + " streams had ended" + first;
}

// Reads one WatchJob stream from step 0 into `log`. A stream that fails UNAVAILABLE before its
// first event never reached the fan-out (the connection could not be made), so it is opened again,
// at most kOpenAttempts times, and counted; a stream that has delivered anything is never retried.
void Watch(const std::string& address, const std::string& job_id, Deadline deadline,
           WatcherLog* log) {
  constexpr int kOpenAttempts = 8;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = v1::JobService::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  request.set_from_step(0);
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = stub->WatchJob(&context, request);
    v1::JobEvent event;
    while (reader->Read(&event)) log->events.push_back(event);
    log->status = reader->Finish();
    if (!log->events.empty() || log->status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        attempt == kOpenAttempts) {
      break;
    }
    if (log->reopened++ == 0) log->open_error = log->status.error_message();
    std::this_thread::sleep_for(std::chrono::milliseconds(250 * attempt));
  }
  log->ended.store(true);
}

// One thread per watcher, each with its own channel and connection (a local subchannel pool), as
// separate `ringctl watch` processes would have.
std::vector<std::thread> StartWatchers(const std::string& address, const std::string& job_id,
                                       Deadline deadline, std::vector<WatcherLog>* logs) {
  std::vector<std::thread> threads;
  for (WatcherLog& log : *logs) {
    threads.emplace_back(
        [&address, &job_id, deadline, &log] { Watch(address, job_id, deadline, &log); });
  }
  return threads;
}

// Cancels `job_id`, a problem when the call fails.
void Cancel(LocalCluster& cluster, const std::string& job_id, Deadline round_deadline,
            Problems* problems) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::Job job;
  grpc::ClientContext context;
  context.set_deadline(Within(10, round_deadline));
  const grpc::Status status = cluster.stub().CancelJob(&context, request, &job);
  if (!status.ok()) problems->Add("CancelJob " + job_id + ": " + status.error_message());
}

// Every job ListJobs returns, following next_page_token; empty (and a problem) on an error.
std::vector<v1::Job> ListAllJobs(LocalCluster& cluster, Deadline round_deadline,
                                 Problems* problems) {
  std::vector<v1::Job> jobs;
  std::string token;
  do {
    v1::ListJobsRequest request;
    request.set_page_size(kListPageSize);
    request.set_page_token(token);
    v1::ListJobsResponse page;
    grpc::ClientContext context;
    context.set_deadline(Within(10, round_deadline));
    const grpc::Status status = cluster.stub().ListJobs(&context, request, &page);
    if (!status.ok()) {
      problems->Add("ListJobs (after " + std::to_string(jobs.size()) +
                    " jobs): " + status.error_message());
      return {};
    }
    jobs.insert(jobs.end(), page.jobs().begin(), page.jobs().end());
    token = page.next_page_token();
  } while (!token.empty());
  return jobs;
}

// What is wrong with `job` as a queued copy of the submitted config; "" when nothing.
std::string QueuedMismatch(const v1::Job& job, const std::string& config,
                           const std::vector<std::string>& overrides) {
  if (job.state() != v1::JOB_STATE_QUEUED) {
    return "is " + v1::JobState_Name(job.state()) + ", not QUEUED";
  }
  if (job.config_toml() != config) return "has a config_toml that is not the submitted one";
  if (std::vector<std::string>(job.overrides().begin(), job.overrides().end()) != overrides) {
    return "has overrides that are not the submitted ones";
  }
  if (job.mesh_size() != 0) return "is QUEUED but has a mesh";
  return "";
}

// The queued jobs, while the watched job still holds the workers: listed once each, QUEUED with
// the submitted config.
void CheckQueued(LocalCluster& cluster, const std::vector<std::string>& ids,
                 const std::string& config, const std::vector<std::string>& overrides,
                 Deadline round_deadline, Problems* problems) {
  std::map<std::string, int> listed;
  for (const v1::Job& job : ListAllJobs(cluster, round_deadline, problems)) {
    if (++listed[job.job_id()] > 1) continue;
    const std::string bad = QueuedMismatch(job, config, overrides);
    if (!bad.empty() && std::count(ids.begin(), ids.end(), job.job_id()) > 0) {
      problems->Add("ListJobs: " + job.job_id() + " " + bad);
    }
  }
  for (const std::string& id : ids) {
    if (listed[id] != 1) {
      problems->Add("ListJobs lists queued " + id + " " + std::to_string(listed[id]) + " times");
    }
    const std::string bad = QueuedMismatch(cluster.Get(id), config, overrides);
    if (!bad.empty()) problems->Add("GetJob: " + id + " " + bad);
  }
}

// Cancels `ids` from kCancelThreads threads at once: the watched job is short, and one CancelJob
// after another (each a store write) took most of its run on a busy CI machine.
void CancelAll(LocalCluster& cluster, const std::vector<std::string>& ids, Deadline round_deadline,
               Problems* problems) {
  std::atomic<size_t> next{0};
  std::vector<Problems> found(kCancelThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kCancelThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = next++; i < ids.size(); i = next++) {
        Cancel(cluster, ids[i], round_deadline, &found[t]);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (Problems& lines : found) {
    for (const std::string& line : lines.Take()) problems->Add(line);
  }
}

// Every cancelled queued job is CANCELLED and was never placed.
void CheckCancelled(LocalCluster& cluster, const std::vector<std::string>& ids,
                    Problems* problems) {
  for (const std::string& id : ids) {
    const v1::Job job = cluster.Get(id);
    if (job.state() != v1::JOB_STATE_CANCELLED || job.mesh_size() != 0) {
      problems->Add("cancelled queued " + id + " is " + v1::JobState_Name(job.state()) + " with " +
                    std::to_string(job.mesh_size()) + " ranks placed");
    }
  }
}

struct History {
  std::vector<v1::StepEvent> steps;
  std::vector<v1::StateChange> changes;
};

History Split(const std::vector<v1::JobEvent>& events) {
  History history;
  for (const v1::JobEvent& event : events) {
    if (event.has_step()) history.steps.push_back(event.step());
    if (event.has_state_change()) history.changes.push_back(event.state_change());
  }
  return history;
}

// What differs between what a watcher saw and the replay; "" when they agree.
std::string Difference(const WatcherLog& log, const History& reference) {
  if (!log.status.ok()) return "stream ended " + log.status.error_message();
  const History seen = Split(log.events);
  for (size_t i = 0; i < std::max(seen.steps.size(), reference.steps.size()); ++i) {
    if (i >= seen.steps.size()) {
      return "missed step " + std::to_string(reference.steps[i].step()) + " and after";
    }
    if (i >= reference.steps.size()) {
      return "got an extra step " + std::to_string(seen.steps[i].step());
    }
    if (seen.steps[i].step() != reference.steps[i].step()) {
      return "got step " + std::to_string(seen.steps[i].step()) + " where step " +
             std::to_string(reference.steps[i].step()) + " belongs";
    }
    if (seen.steps[i].record_json() != reference.steps[i].record_json()) {
      return "got other record_json bytes for step " + std::to_string(seen.steps[i].step());
    }
  }
  std::string seen_changes, reference_changes;
  for (const v1::StateChange& c : seen.changes) {
    seen_changes += v1::JobState_Name(c.to_state()) + " ";
  }
  for (const v1::StateChange& c : reference.changes) {
    reference_changes += v1::JobState_Name(c.to_state()) + " ";
  }
  if (seen_changes != reference_changes) {
    return "saw state changes [" + seen_changes + "], the store has [" + reference_changes + "]";
  }
  if (log.events.empty() || !log.events.back().has_state_change() ||
      log.events.back().state_change().to_state() != v1::JOB_STATE_SUCCEEDED) {
    return "did not end with the final state change";
  }
  return "";
}

// The finished job's history as the store replays it, checked to be steps 1..N then SUCCEEDED.
History Reference(LocalCluster& cluster, const std::string& job_id, int steps,
                  Deadline round_deadline, Problems* problems) {
  grpc::Status status;
  const std::vector<v1::JobEvent> events =
      cluster.Watch(job_id, 0, std::max(1.0, std::min(30.0, SecondsLeft(round_deadline))), &status);
  if (!status.ok()) problems->Add("replay of " + job_id + ": " + status.error_message());
  History history = Split(events);
  bool in_order = static_cast<int>(history.steps.size()) == steps;
  for (size_t i = 0; in_order && i < history.steps.size(); ++i) {
    in_order = history.steps[i].step() == static_cast<int64_t>(i + 1);
  }
  if (!in_order) {
    problems->Add("the store replays " + std::to_string(history.steps.size()) + " step events of " +
                  job_id + ", not steps 1.." + std::to_string(steps));
  }
  if (events.empty() || !events.back().has_state_change() ||
      events.back().state_change().to_state() != v1::JOB_STATE_SUCCEEDED) {
    problems->Add("the store's history of " + job_id + " does not end SUCCEEDED");
  }
  return history;
}

}  // namespace

ProcessMemory ReadProcessMemory(pid_t pid) {
  ProcessMemory memory;
  std::istringstream status(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(status, line);) {
    // "VmRSS:\t   23456 kB"
    if (line.rfind("VmRSS:", 0) == 0) memory.rss_kib = std::atoll(line.c_str() + 6);
    if (line.rfind("VmHWM:", 0) == 0) memory.hwm_kib = std::atoll(line.c_str() + 6);
  }
  return memory;
}

double CpuSeconds(pid_t pid) {
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  // The command name (field 2) is in parentheses and may hold spaces; utime and stime are fields
  // 14 and 15, in clock ticks.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 1));
  std::string field;
  int64_t utime = -1, stime = -1;
  for (int n = 3; n <= 15 && fields >> field; ++n) {
    if (n == 14) utime = std::atoll(field.c_str());
    if (n == 15) stime = std::atoll(field.c_str());
  }
  if (utime < 0 || stime < 0) return -1;
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  if (values.size() % 2 == 1) return values[mid];
  const double upper = values[mid];
  return (upper + *std::max_element(values.begin(), values.begin() + mid)) / 2;
}

LoadRoundResult RunLoadRound(LocalCluster& cluster, const LoadRoundOptions& options) {
  LoadRoundResult result;
  Problems problems;
  const Clock::time_point start = Clock::now();
  const Deadline deadline = Within(options.timeout_seconds, Deadline::max());
  const pid_t coordinator = cluster.coordinator_pid();
  result.before = ReadProcessMemory(coordinator);
  const double coordinator_cpu = CpuSeconds(coordinator);
  const double client_cpu = CpuSeconds(getpid());

  const std::string config_path = ConfigPath("debug_model.toml");
  const std::string config = ReadFile(config_path);
  const std::vector<std::string> overrides = JobOverrides(options);
  // With watchers or a queue, a gate job holds every worker until all of them are in place, so the
  // watched job runs its every step under the load however slowly 200 connections open on a busy
  // machine (unheld, a short job could end before they did).
  std::string gate;
  if (options.watchers > 0 || options.queued > 0) {
    LoadRoundOptions gate_options = options;
    gate_options.steps = kGateSteps;
    gate = cluster.Submit(config_path, JobOverrides(gate_options)).job_id();
    if (gate.empty()) {
      result.problems = {"the gate job was not submitted"};
      return result;
    }
  }
  result.job_id = cluster.Submit(config_path, overrides).job_id();
  if (result.job_id.empty()) {
    result.problems = {"the watched job was not submitted"};
    return result;
  }

  std::vector<WatcherLog> logs(options.watchers);
  const Clock::time_point watchers_start = Clock::now();
  std::vector<std::thread> watchers =
      StartWatchers(cluster.address(), result.job_id, deadline, &logs);
  std::vector<std::string> queued;
  for (int i = 0; i < options.queued; ++i) {
    const std::string id = cluster.Submit(config_path, overrides).job_id();
    if (!id.empty()) queued.push_back(id);
  }
  if (static_cast<int>(queued.size()) != options.queued) {
    problems.Add(std::to_string(options.queued - queued.size()) + " queued jobs not submitted");
  }
  if (options.watchers > 0 && !AllSubscribed(cluster, options.watchers, deadline)) {
    problems.Add("only " + std::to_string(Gauge(cluster, "ringtrain_coordinator_watchers")) +
                 " of " + std::to_string(options.watchers) + " watchers subscribed within 60 s; " +
                 EndedEarly(logs));
  }
  result.subscribe_seconds = SecondsSince(watchers_start);
  result.loaded = ReadProcessMemory(coordinator);
  // The queue is checked while the gate holds the workers, where every queued job must be QUEUED
  // whatever the machine's speed; it is cancelled below while the watched job runs.
  if (!queued.empty()) CheckQueued(cluster, queued, config, overrides, deadline, &problems);
  if (!gate.empty()) {
    Cancel(cluster, gate, deadline, &problems);
    cluster.WaitForJob(
        result.job_id,
        [](const v1::Job& j) {
          return j.state() != v1::JOB_STATE_QUEUED && j.state() != v1::JOB_STATE_ASSIGNED;
        },
        std::min(60.0, SecondsLeft(deadline)), "the watched job to start after the gate");
  }

  if (!queued.empty()) {
    // Only while the watched job holds the workers are the queued jobs sure never to be placed;
    // once it has ended they start, and one line says so instead of one per job.
    const Clock::time_point cancel_start = Clock::now();
    bool held = !IsFinal(cluster.Get(result.job_id).state());
    CancelAll(cluster, queued, deadline, &problems);
    held = held && !IsFinal(cluster.Get(result.job_id).state());
    result.cancel_seconds = SecondsSince(cancel_start);
    if (held) {
      CheckCancelled(cluster, queued, &problems);
    } else {
      problems.Add(result.job_id + " ended before its queue was checked and cancelled (" +
                   std::to_string(SecondsSince(start)) + " s in)");
    }
  }

  const bool ended = cluster.WaitForJob(
      result.job_id, [](const v1::Job& j) { return IsFinal(j.state()); }, SecondsLeft(deadline),
      "end");
  for (std::thread& t : watchers) t.join();
  result.coordinator_cpu_seconds = CpuSeconds(coordinator) - coordinator_cpu;
  result.client_cpu_seconds = CpuSeconds(getpid()) - client_cpu;
  if (!ended) {
    result.problems = problems.Take();
    result.problems.push_back(result.job_id + " did not end within the round");
    return result;
  }

  const History reference = Reference(cluster, result.job_id, options.steps, deadline, &problems);
  for (size_t w = 0; w < logs.size(); ++w) {
    result.events_delivered += static_cast<int64_t>(logs[w].events.size());
    if (logs[w].reopened > 0 && result.streams_reopened == 0) {
      result.open_error = logs[w].open_error;
    }
    result.streams_reopened += logs[w].reopened;
    const std::string difference = Difference(logs[w], reference);
    if (!difference.empty()) problems.Add("watcher " + std::to_string(w) + " " + difference);
  }
  for (const v1::StepEvent& step : reference.steps) {
    if (step.step() >= kFirstTimedStep) result.step_seconds.push_back(step.step_seconds());
  }
  result.median_step_seconds = Median(result.step_seconds);

  if (!cluster.WaitForIdleWorkers(options.cp, std::min(30.0, SecondsLeft(deadline)))) {
    problems.Add("the workers are not idle after the round");
  }
  result.after = ReadProcessMemory(coordinator);
  result.seconds = SecondsSince(start);
  result.problems = problems.Take();
  return result;
}

}  // namespace ringtrain::testing
