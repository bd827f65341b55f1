// Internal to ringtrain_job_store: whether an open store still holds every record it took. SQLite's
// quick_check finds damaged pages, not rows deleted from sound ones; those the store's own counts
// reveal. Jobs are never deleted (there is no retention), so a store whose job counter says N must
// hold job-000001..N exactly; step events are never deleted either, so each job must hold as many
// as it took (jobs.step_event_count) and its last_step must be its highest. Two queries, each one
// pass over its table, however many jobs the store holds.
#ifndef RINGTRAIN_COORDINATOR_JOB_STORE_CHECK_H_
#define RINGTRAIN_COORDINATOR_JOB_STORE_CHECK_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ringtrain {

class SqliteDb;

// What the store at `db` lost, given its job counter `next_job_number`: "" when nothing, else one
// line naming the missing job ids (ranges, the first few and a count) or the jobs whose step
// events are missing and which steps. The caller names the file and the remedy. SQLite's own
// failures come back as its Status.
absl::StatusOr<std::string> FindLostRecords(SqliteDb& db, int64_t next_job_number);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_JOB_STORE_CHECK_H_
