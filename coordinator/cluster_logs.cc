// The Cluster's part in `ringctl logs`: reaching the worker that holds a rank's log.
#include "absl/strings/str_cat.h"
#include "coordinator/cluster.h"

namespace ringtrain {

absl::Status Cluster::SendToWorker(const std::string& worker_id,
                                   const v1::CoordinatorMessage& message) {
  absl::MutexLock lock(&mu_);
  const Worker* const found = workers_.Find(worker_id);
  if (found == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("worker ", worker_id,
                     " (which holds the log) is not registered: it was lost and purged, "
                     "or has not come back since the coordinator restarted"));
  }
  const Worker& worker = *found;
  const std::string who = absl::StrCat("worker ", worker_id, " (host ", worker.info.host_label,
                                       ", which holds the log)");
  if (worker.state == WorkerState::kLost) {
    return absl::UnavailableError(absl::StrCat(
        who, " is LOST since ", absl::FormatTime("%H:%M:%S", worker.lost_at, absl::UTCTimeZone()),
        " UTC: its agent stopped answering"));
  }
  if (worker.channel == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(who, " is between sessions (it reconnects on its own): try again"));
  }
  worker.channel->Send(message);
  return absl::OkStatus();
}

}  // namespace ringtrain
