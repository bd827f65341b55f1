// `ringctl plan CONFIG [--section.key=value ...] [--world N] [--device-memory SIZE]`: the per-rank
// memory of a training step by arithmetic on the config (common/plan/memory_plan.h) — weights,
// gradients, AdamW state, gathered weights, activations, ring buffers, the largest transient and
// the peak; whether it fits the device; the largest seq_len that does. Nothing runs, nothing is
// contacted.
//
// Exit statuses (client/exit_codes.h): kExitOk when the peak fits, kExitFailed when it does not,
// kExitUsage for a bad size, an unreadable or invalid config, or a mesh the world cannot hold.
#ifndef RINGTRAIN_CLIENT_PLAN_COMMAND_H_
#define RINGTRAIN_CLIENT_PLAN_COMMAND_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/command.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

// Only `output` of CommonFlags (plan contacts nothing).
struct PlanFlags : CommonFlags {
  std::string config;
  int64_t world = 0;                    // not given: RequestedWorldSize(config)
  std::string device_memory = "80GiB";  // ParseByteSize (common/byte_size.h)
  std::string device = "cuda";          // cuda | cpu: the ranks' device kind (PlanDevice)
  CLI::App* plan = nullptr;             // for its extra `--section.key=value` args
};

// Adds the `plan` subcommand to `app`; parsing fills `*flags`, which must outlive `app`.
CLI::App* AddPlanCommand(CLI::App& app, PlanFlags* flags);

// Loads the config with its overrides, plans it and prints the table or the JSON. Returns the exit
// status.
int RunPlan(const PlanFlags& flags);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_PLAN_COMMAND_H_
