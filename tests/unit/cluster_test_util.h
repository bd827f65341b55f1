// What the Cluster unit tests share: a tiny job config (tiny_job_config.h) and an
// AgentChannel that records what the coordinator sends one agent.
#ifndef RINGTRAIN_TESTS_UNIT_CLUSTER_TEST_UTIL_H_
#define RINGTRAIN_TESTS_UNIT_CLUSTER_TEST_UTIL_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/cluster.h"
#include "ringtrain/v1/worker_service.pb.h"
#include "tests/unit/tiny_job_config.h"

namespace ringtrain {

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
