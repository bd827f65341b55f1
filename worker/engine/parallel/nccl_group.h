// The NCCL backend of a process group whose ranks compute on CUDA devices. Compiled only in the
// CUDA build (-DRINGTRAIN_CUDA=ON, which defines RINGTRAIN_WITH_CUDA); the CPU build uses Gloo
// (comm.cc). This header and nccl_group.cc are the only NCCL-specific code.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_NCCL_GROUP_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_NCCL_GROUP_H_

#include <chrono>
#include <cstdint>
#include <string>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ringtrain {

// A ProcessGroupNCCL backend of `size` ranks over `store` (already prefixed for its group), on the
// current CUDA device. A collective that fails or exceeds `timeout` makes Work::wait throw, as
// Gloo's does, instead of hanging or killing the process (see nccl_group.cc for the settings).
c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int64_t rank, int64_t size,
                                                  std::chrono::milliseconds timeout);

// NCCL's version as "2.28.9" (of the libnccl.so.2 this process loaded).
std::string NcclVersion();

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_NCCL_GROUP_H_
