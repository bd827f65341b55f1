// Between the plain job records of job.h and the ringtrain.v1 wire messages.
#ifndef RINGTRAIN_COORDINATOR_PROTO_CONVERT_H_
#define RINGTRAIN_COORDINATOR_PROTO_CONVERT_H_

#include <cstdint>

#include "coordinator/job.h"
#include "ringtrain/v1/job_service.pb.h"

namespace ringtrain {

v1::JobState ToProto(JobState state);
void ToProto(const JobError& error, v1::JobError* out);
v1::Job ToProto(const JobRecord& job);
v1::JobEvent ToProtoEvent(const StepEvent& event);
v1::JobEvent ToProtoEvent(const StateChange& change);
void SetTimestamp(int64_t unix_ms, google::protobuf::Timestamp* out);

}  // namespace ringtrain

#endif  // RINGTRAIN_COORDINATOR_PROTO_CONVERT_H_
