// Internal to ringtrain_job_store: the store's tables, and how JobStore::Open creates them in a new
// file, brings a file of an older coordinator up to date, and refuses one that lost any of them.
//
// A new file and a file whose tables were dropped look alike to SQLite; the schema version in the
// database header (PRAGMA user_version) tells them apart. A store created or opened by this
// coordinator carries kStoreSchemaVersion and must hold every table; only a file holding none of
// them and no version is new. Stores of coordinators from before the version (user_version 0) may
// lack what was added since (the workers table, some columns) and gain it once; the tables every
// such store had are required all the same.
#ifndef RINGTRAIN_COORDINATOR_JOB_STORE_SCHEMA_H_
#define RINGTRAIN_COORDINATOR_JOB_STORE_SCHEMA_H_

#include <string>

#include "absl/status/statusor.h"

namespace ringtrain {

class SqliteDb;

// 2: every table, the job counter row, jobs.step_event_count. (1 was never written: stores from
// before the version read 0.)
inline constexpr int kStoreSchemaVersion = 3;

// In one transaction: creates the schema in a new file, or checks an existing store's tables (and
// its job counter row) and adds what an older coordinator's store lacks, then records
// kStoreSchemaVersion. Returns what the store lost ("" when nothing: the store is ready), e.g.
// "it has no step_events table (its step events), although it is a store of schema version 2"; the
// caller names the file and the remedy. SQLite's own failures come back as its Status.
absl::StatusOr<std::string> PrepareSchema(SqliteDb& db);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_JOB_STORE_SCHEMA_H_
