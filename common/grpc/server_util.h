// Server-side gRPC helpers: every ringtrain server runs the standard health and reflection
// services.
#ifndef RINGTRAIN_COMMON_GRPC_SERVER_UTIL_H_
#define RINGTRAIN_COMMON_GRPC_SERVER_UTIL_H_

namespace ringtrain {

// Turns on the default grpc.health.v1.Health service (overall status SERVING once the server
// starts) and the server reflection plugin. Call before constructing any grpc::ServerBuilder;
// both settings are process-wide.
void EnableStandardServices();

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_GRPC_SERVER_UTIL_H_
