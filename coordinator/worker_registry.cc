#include "coordinator/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "coordinator/proto_convert.h"

namespace ringtrain {

bool Worker::OwnsRank(const std::string& id, int r, int a) const {
  return state == WorkerState::kBusy && job_id == id && rank == r && attempt == a;
}

void Worker::Assign(const std::string& id, int r, int a) {
  state = WorkerState::kBusy;
  job_id = id;
  rank = r;
  attempt = a;
}

void Worker::Release() {
  if (state == WorkerState::kBusy) state = WorkerState::kIdle;
  job_id.clear();
  rank = -1;
}

void Worker::MarkLost(absl::Time now, const std::string& why) {
  state = WorkerState::kLost;
  lost_at = now;
  if (channel != nullptr) {
    channel->Close(absl::UnavailableError(absl::StrCat("declared lost: ", why)));
    channel = nullptr;
  }
  job_id.clear();
  rank = -1;
}

const char* Worker::StateName() const {
  if (state == WorkerState::kLost) return "lost";
  if (channel == nullptr) return "disconnected";
  return state == WorkerState::kBusy ? "busy" : "idle";
}

Worker* WorkerRegistry::Find(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

const Worker* WorkerRegistry::Find(const std::string& id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

Worker& WorkerRegistry::Register(const std::string& id) {
  expected_.erase(id);
  Reserve(id);
  Worker& w = workers_[id];
  w = Worker();
  return w;
}

absl::Status WorkerRegistry::CheckFree(const std::string& id) const {
  const Worker* holder = Find(id);
  if (holder == nullptr || holder->state == WorkerState::kLost) return absl::OkStatus();
  const bool connected = holder->channel != nullptr;
  return absl::AlreadyExistsError(absl::StrCat(
      "worker id \"", id, "\" is held by a live worker on host \"", holder->info.host_label,
      "\" (address ", holder->info.address, ", ", holder->StateName(), "); ",
      connected ? "give this agent another --worker-id, or stop that agent first"
                : "its session ended: the id is free once it is declared lost (no heartbeat "
                  "within the coordinator's --worker-timeout)"));
}

std::string WorkerRegistry::NewId() { return absl::StrCat("worker-", next_number_++); }

void WorkerRegistry::Reserve(const std::string& id) {
  int64_t number = 0;
  if (absl::StartsWith(id, "worker-") && absl::SimpleAtoi(id.substr(7), &number)) {
    next_number_ = std::max(next_number_, number + 1);
  }
}

void WorkerRegistry::ExpectBack(const std::string& id, absl::Time purge_at) {
  expected_[id] = purge_at;
}

std::vector<std::string> WorkerRegistry::Purge(absl::Time now, absl::Duration lost_for) {
  std::vector<std::string> purged;
  for (auto it = workers_.begin(); it != workers_.end();) {
    const Worker& w = it->second;
    if (w.state != WorkerState::kLost || !w.job_id.empty() || now - w.lost_at < lost_for) {
      ++it;
      continue;
    }
    RT_LOG(Info) << it->first << " purged: lost for "
                 << absl::FormatDuration(absl::Trunc(now - w.lost_at, absl::Seconds(1)));
    purged.push_back(it->first);
    it = workers_.erase(it);
  }
  for (auto it = expected_.begin(); it != expected_.end();) {
    if (now < it->second) {
      ++it;
      continue;
    }
    purged.push_back(it->first);
    it = expected_.erase(it);
  }
  return purged;
}

std::vector<WorkerInfo> WorkerRegistry::Schedulable() const {
  std::vector<WorkerInfo> out;
  for (const auto& [id, w] : workers_) {
    if (w.state == WorkerState::kLost) continue;
    WorkerInfo info = w.info;
    info.idle = w.state == WorkerState::kIdle && w.channel != nullptr;
    out.push_back(std::move(info));
  }
  return out;
}

std::map<std::string, int64_t> WorkerRegistry::LiveByKind() const {
  std::map<std::string, int64_t> by_kind;
  for (const auto& [id, w] : workers_) {
    if (w.state != WorkerState::kLost) ++by_kind[w.info.device_kind];
  }
  return by_kind;
}

std::vector<Worker*> WorkerRegistry::Silent(absl::Time now, absl::Duration timeout) {
  std::vector<Worker*> silent;
  for (auto& [id, w] : workers_) {
    if (w.state != WorkerState::kLost && now - w.last_heartbeat > timeout) silent.push_back(&w);
  }
  return silent;
}

std::vector<v1::Worker> WorkerRegistry::List() const {
  std::vector<v1::Worker> out;
  for (const auto& [id, w] : workers_) {
    v1::Worker& p = out.emplace_back();
    p.set_worker_id(id);
    p.set_device_kind(w.info.device_kind);
    p.set_device(w.device);
    p.set_device_name(w.device_name);
    p.set_device_memory_bytes(w.device_memory_bytes);
    p.set_host_label(w.info.host_label);
    p.set_address(w.info.address);
    if (w.state == WorkerState::kLost || w.channel == nullptr) {
      p.set_state(v1::WORKER_STATE_LOST);
    } else {
      p.set_state(w.state == WorkerState::kBusy ? v1::WORKER_STATE_BUSY : v1::WORKER_STATE_IDLE);
    }
    if (w.state == WorkerState::kBusy) {
      p.set_job_id(w.job_id);
      p.set_rank(w.rank);
    }
    SetTimestamp(absl::ToUnixMillis(w.last_heartbeat), p.mutable_last_heartbeat());
  }
  return out;
}

std::map<std::string, int> WorkerRegistry::CountByState() const {
  std::map<std::string, int> counts;
  for (const char* state : {"idle", "busy", "disconnected", "lost"}) counts[state] = 0;
  for (const auto& [id, w] : workers_) ++counts[w.StateName()];
  return counts;
}

}  // namespace ringtrain
