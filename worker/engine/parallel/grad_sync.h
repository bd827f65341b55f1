// Gradient and loss reduction over the whole dp × cp world. Parameters are replicated on every rank;
// each rank's loss was divided by the GLOBAL token count before backward, so summing gradients over
// the world gives exactly the gradient of the global token-mean loss.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_GRAD_SYNC_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_GRAD_SYNC_H_

#include <cstdint>
#include <vector>

#include <ATen/Tensor.h>

#include "worker/engine/parallel/comm.h"

namespace ringtrain {

// Sums every parameter's .grad() over the world, in flat buckets of about `bucket_bytes`; all
// buckets' all-reduces are issued before the first is waited on. Parameters without a gradient get
// a zero one first (every rank must contribute the same layout).
void AllReduceGradients(Communicator& comm, const std::vector<at::Tensor>& params,
                        int64_t bucket_bytes = 25 << 20);

// Sum of `value` over the world (float64).
double AllReduceSum(Communicator& comm, double value);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_GRAD_SYNC_H_
