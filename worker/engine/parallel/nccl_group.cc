#include "worker/engine/parallel/nccl_group.h"

#include <nccl.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace ringtrain {

c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int64_t rank, int64_t size,
                                                  std::chrono::milliseconds timeout) {
  // Failure handling, set explicitly (a value already in the environment wins):
  // - blocking wait: Work::wait(timeout) blocks the host until the collective finished and throws
  //   when it failed or ran past `timeout` — the same error path as Gloo, so the step fails with
  //   an error naming the lost peer (Communicator::DiagnoseFailure) instead of hanging;
  // - async error handling 2 (CleanUpOnly): the watchdog aborts the communicators of a failed or
  //   timed-out collective but does not tear the process down, so that error is what we report.
  setenv("TORCH_NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
  setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", /*overwrite=*/0);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, int(rank), int(size), options);
}

std::string NcclVersion() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return absl::StrCat(version / 10000, ".", version / 100 % 100, ".", version % 100);
}

}  // namespace ringtrain
