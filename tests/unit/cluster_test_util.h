// What the Cluster unit tests share: a job config small enough to validate in microseconds and an
// AgentChannel that records what the coordinator sends one agent.
#ifndef RINGTRAIN_TESTS_UNIT_CLUSTER_TEST_UTIL_H_
#define RINGTRAIN_TESTS_UNIT_CLUSTER_TEST_UTIL_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/cluster.h"
#include "ringtrain/v1/worker_service.pb.h"

namespace ringtrain {

// A valid one-layer config of 3 steps (the tests never run it).
inline constexpr char kTinyJobConfig[] = R"(
[model]
dim = 64
n_layers = 1
n_heads = 4
n_kv_heads = 2
vocab_size = 64
multiple_of = 32
max_seq_len = 256
[training]
seq_len = 64
local_batch_size = 2
steps = 3
[lr_scheduler]
warmup_steps = 0
)";

// Records every message the coordinator sends to one agent, and how its stream was closed.
class FakeChannel : public AgentChannel {
 public:
  void Send(const v1::CoordinatorMessage& message) override { sent.push_back(message); }
  void Close(const absl::Status& status) override { closed = status; }
  std::vector<v1::CoordinatorMessage> sent;
  std::optional<absl::Status> closed;
};

}  // namespace ringtrain

#endif  // RINGTRAIN_TESTS_UNIT_CLUSTER_TEST_UTIL_H_
