// NCCL process groups for ranks on CUDA devices. Compiled only when the build is configured with
// -DRINGTRAIN_CUDA=ON against a CUDA LibTorch (which defines RINGTRAIN_WITH_CUDA); the CPU build
// uses Gloo (comm.cc). This header and nccl_group.cc are the only NCCL-specific code.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_NCCL_GROUP_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_NCCL_GROUP_H_

#include <chrono>
#include <cstdint>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ringtrain {

// A ProcessGroupNCCL of `size` ranks over `store` (keys under `prefix`). Collectives that exceed
// `timeout` abort with an error instead of hanging (NCCL's async error handling is switched on).
c10::intrusive_ptr<c10d::ProcessGroup> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::string& prefix, int64_t rank,
                                                     int64_t size,
                                                     std::chrono::milliseconds timeout);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_NCCL_GROUP_H_
