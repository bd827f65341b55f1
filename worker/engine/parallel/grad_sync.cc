#include "worker/engine/parallel/grad_sync.h"

#include <torch/torch.h>

namespace ringtrain {

void AllReduceGradients(Communicator& comm, const std::vector<at::Tensor>& params,
                        int64_t bucket_bytes, at::ScalarType reduce_dtype) {
  torch::NoGradGuard no_grad;
  std::vector<std::vector<at::Tensor>> buckets(1);
  int64_t bytes = 0;
  for (const auto& p : params) {
    if (!p.grad().defined()) const_cast<at::Tensor&>(p).mutable_grad() = torch::zeros_like(p);
    if (bytes > 0 && bytes + int64_t(p.grad().nbytes()) > bucket_bytes) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(p.grad());
    bytes += p.grad().nbytes();
  }
  std::vector<at::Tensor> flats;
  std::vector<PendingWork> works;
  for (const auto& bucket : buckets) {
    std::vector<at::Tensor> views;
    for (const auto& g : bucket) views.push_back(g.reshape({-1}));
    flats.push_back(torch::cat(views).to(reduce_dtype));  // a no-op cast when already that dtype
    comm.stats().bytes_sent += flats.back().nbytes();
    works.push_back(CommCall("all-reduce of gradients",
                             [&] { return comm.AllReduce(comm.world(), flats.back()); }));
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    CommCall("all-reduce of gradients", [&] {
      comm.Wait(works[b]);
      return 0;
    });
    int64_t offset = 0;
    for (auto& g : buckets[b]) {
      g.copy_(flats[b].narrow(0, offset, g.numel()).view_as(g));  // widens a bfloat16 bucket
      offset += g.numel();
    }
  }
}

double AllReduceSum(Communicator& comm, double value) {
  at::Tensor t = torch::tensor({value}, torch::kFloat64).to(comm.device());
  PendingWork work =
      CommCall("all-reduce of the loss", [&] { return comm.AllReduce(comm.world(), t); });
  CommCall("all-reduce of the loss", [&] {
    comm.Wait(work);
    return 0;
  });
  return t.item<double>();
}

}  // namespace ringtrain
