#include "worker/engine/parallel/cp_shard.h"

#include <torch/torch.h>

#include <memory>
#include <utility>

#include "worker/engine/parallel/document_balancer.h"

namespace ringtrain {

ShardedBatch CpShard(const at::Tensor& inputs, const at::Tensor& labels, const ShardSpec& spec) {
  const int64_t batch = inputs.size(0), seq_len = inputs.size(1);
  ShardedBatch shard;
  std::shared_ptr<const DocumentMask> mask;
  if (spec.eos_id) {
    const at::Tensor tokens = inputs.to(torch::kCPU, torch::kInt64).contiguous();
    mask = std::make_shared<DocumentMask>(
        MakeDocumentMask(tokens.data_ptr<int64_t>(), batch, seq_len, *spec.eos_id));
  }
  CpLayout layout = MakeCpLayout(seq_len, spec.cp, spec.load_balancer, mask.get());
  shard.positions.positions = layout.positions[size_t(spec.cp_rank)];
  shard.positions.documents = mask;
  shard.cp_work = std::move(layout.work);
  if (spec.cp == 1) {
    shard.inputs = inputs;
    shard.labels = labels;
    return shard;
  }
  shard.positions.cp_layout =
      std::make_shared<const std::vector<std::vector<int64_t>>>(std::move(layout.positions));
  const at::Tensor index = shard.positions.AsTensor();
  shard.inputs = inputs.index_select(1, index);
  shard.labels = labels.index_select(1, index);
  return shard;
}

ShardedBatch CpShard(const at::Tensor& inputs, const at::Tensor& labels, int64_t cp,
                     int64_t cp_rank, LoadBalancer load_balancer) {
  return CpShard(inputs, labels, ShardSpec{cp, cp_rank, load_balancer, std::nullopt});
}

}  // namespace ringtrain
