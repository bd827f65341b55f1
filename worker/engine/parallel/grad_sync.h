// Gradient and loss reduction over the whole dp × cp world. Parameters are replicated on every
// rank; each rank's loss was divided by the GLOBAL token count before backward, so summing
// gradients over the world gives exactly the gradient of the global token-mean loss. With gradient
// accumulation the A micro-batches' backward passes add into the same float32 .grad first, and the
// reduction runs once per step.
//
// Reduce dtype (training.mixed_precision_reduce). float32: the buckets are reduced as they are.
// bfloat16: each bucket is rounded to bfloat16 before the all-reduce and widened back to float32
// into .grad after, halving the bytes sent. That rounds (i) every rank's local gradient, once, to
// bfloat16's 8-bit significand (relative error <= 2^-9 per element; the micro-batch accumulation
// before it is float32 and is not rounded), and (ii) the sum itself: the collective adds the ranks'
// bfloat16 values in bfloat16, so each partial sum is rounded again (up to world − 1 roundings per
// element, in an order the backend chooses). The widening back is exact. The trainer has no
// communicator in a world of one rank and calls none of this, so nothing is rounded there.
#ifndef RINGTRAIN_WORKER_ENGINE_PARALLEL_GRAD_SYNC_H_
#define RINGTRAIN_WORKER_ENGINE_PARALLEL_GRAD_SYNC_H_

#include <cstdint>
#include <vector>

#include <ATen/Tensor.h>

#include "worker/engine/parallel/comm.h"

namespace ringtrain {

// Sums every parameter's .grad() over the world, in flat buckets of about `bucket_bytes` (counted
// in the gradients' own dtype); all buckets' all-reduces are issued before the first is waited on.
// The buckets travel in `reduce_dtype` (at::kFloat or at::kBFloat16, see above; the bytes sent,
// comm.stats().bytes_sent, are those of that dtype). Parameters without a gradient get a zero one
// first (every rank must contribute the same layout).
void AllReduceGradients(Communicator& comm, const std::vector<at::Tensor>& params,
                        int64_t bucket_bytes = 25 << 20, at::ScalarType reduce_dtype = at::kFloat);

// Sum of `value` over the world (float64).
double AllReduceSum(Communicator& comm, double value);

}  // namespace ringtrain

#endif  // RINGTRAIN_WORKER_ENGINE_PARALLEL_GRAD_SYNC_H_
