#include "worker/engine/parallel/nccl_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstdlib>

namespace ringtrain {

c10::intrusive_ptr<c10d::ProcessGroup> MakeNcclGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::string& prefix, int64_t rank,
                                                     int64_t size,
                                                     std::chrono::milliseconds timeout) {
  // Without async error handling a collective whose peer died blocks forever on the GPU stream;
  // with it, the watchdog aborts the communicator after `timeout` and wait() throws.
  setenv("NCCL_ASYNC_ERROR_HANDLING", "1", /*overwrite=*/0);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, int(rank), int(size), options);
}

}  // namespace ringtrain
