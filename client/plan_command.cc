#include "client/plan_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/exit_codes.h"
#include "client/job_format.h"
#include "common/byte_size.h"
#include "common/config/hf_config.h"
#include "common/config/job_config.h"
#include "common/config/mesh.h"
#include "common/plan/fitting_degrees.h"
#include "common/plan/memory_plan.h"

namespace ringtrain {
namespace {

const char* DtypeName(MixedPrecision p) {
  return p == MixedPrecision::kBFloat16 ? "bfloat16" : "float32";
}

std::string AcName(int64_t every) {
  if (every == 0) return "none";
  if (every == 1) return "full";
  if (every < 0) return "selective op";
  return absl::StrCat("selective every ", every);
}

std::string Bytes(int64_t bytes) {
  return FormatBytes(static_cast<uint64_t>(std::max<int64_t>(bytes, 0)));
}

// The context-parallel methods this config's cp degree and heads allow: ring, ulysses, and hybrid
// with each Ulysses degree strictly between 1 and cp; each planned on the same mesh.
struct MethodPlan {
  ContextParallelMethod method;
  int64_t ulysses;
  MemoryPlan plan;
};

PlanDevice DeviceOf(const PlanFlags& flags) {
  return flags.device == "cpu" ? PlanDevice::kCpu : PlanDevice::kCuda;
}

std::vector<MethodPlan> PlanMethods(const JobConfig& config, const MeshDegrees& mesh,
                                    PlanDevice device) {
  std::vector<MethodPlan> plans;
  if (mesh.cp <= 1) return plans;
  auto add = [&](ContextParallelMethod method, int64_t u) {
    if (!UlyssesSplitsHeads(config.model.n_heads, config.model.n_kv_heads, u)) return;
    JobConfig c = config;
    c.parallelism.context_parallel_method = method;
    c.parallelism.context_parallel_ulysses_degree =
        method == ContextParallelMethod::kHybrid ? u : 0;
    MeshDegrees m = mesh;
    m.ulysses = u;
    plans.push_back({method, u, PlanMemory(c, m, device)});
  };
  add(ContextParallelMethod::kRing, 1);
  add(ContextParallelMethod::kUlysses, mesh.cp);
  for (int64_t u = 2; u < mesh.cp; ++u) {
    if (mesh.cp % u == 0) add(ContextParallelMethod::kHybrid, u);
  }
  return plans;
}

// A config whose training.seq_len is above its model.max_seq_len is refused as it stands; the plan
// asks what it would take, so it plans it with model.max_seq_len raised to the sequence length
// (only the RoPE tables grow) and says so. The config with the raise, or the original error when
// the raise is not what was wrong. `raised` gets the new max_seq_len (0: not raised).
absl::StatusOr<JobConfig> LoadForPlan(const std::string& path,
                                      const std::vector<std::string>& overrides, int64_t* raised) {
  *raised = 0;
  absl::StatusOr<JobConfig> config = LoadJobConfig(path, overrides);
  if (config.ok()) return config;
  std::vector<std::string> widest = overrides;
  widest.push_back(absl::StrCat("model.max_seq_len=", int64_t{1} << 24));  // the key's maximum
  const absl::StatusOr<JobConfig> probe = LoadJobConfig(path, widest);
  if (!probe.ok()) return config;
  std::vector<std::string> exact = overrides;
  exact.push_back(absl::StrCat("model.max_seq_len=", probe->training.seq_len));
  absl::StatusOr<JobConfig> fitted = LoadJobConfig(path, exact);
  if (!fitted.ok()) return config;
  *raised = fitted->model.max_seq_len;
  return fitted;
}

// "does NOT fit" followed by what would: the smallest cp and shard degrees (fitting_degrees.h).
std::string FittingAdvice(const FittingDegrees& fit) {
  std::vector<std::string> ways;
  if (fit.cp.degree > 0) {
    ways.push_back(absl::StrCat("--parallelism.context_parallel_degree=", fit.cp.degree, " (world ",
                                fit.cp.world, ")"));
  }
  if (fit.shard.degree > 0) {
    ways.push_back(absl::StrCat("--parallelism.data_parallel_shard_degree=", fit.shard.degree,
                                " (world ", fit.shard.world, ")"));
  }
  if (ways.empty()) {
    return absl::StrCat(
        "no cp or shard degree up to ", kMaxSuggestedDegree,
        " fits: shorten training.seq_len or the batch, or checkpoint activations\n");
  }
  return absl::StrCat("the smallest that fit: ", absl::StrJoin(ways, ", or "), "\n");
}

std::string MethodName(const MethodPlan& m, int64_t cp) {
  if (m.method == ContextParallelMethod::kHybrid) {
    return absl::StrCat("hybrid ", m.ulysses, " × ", cp / m.ulysses);
  }
  return ChoiceName(m.method);
}

nlohmann::json PlanJson(const PlanFlags& flags, const JobConfig& config, int64_t world,
                        const MemoryPlan& plan, int64_t device, int64_t largest_seq,
                        const FittingDegrees* fit, int64_t raised_max_seq_len) {
  nlohmann::json j;
  j["config"] = flags.config;
  if (raised_max_seq_len > 0) j["raised_max_seq_len"] = raised_max_seq_len;
  j["world"] = world;
  j["mesh"] = {{"replicate", plan.mesh.replicate},
               {"shard", plan.mesh.shard},
               {"cp", plan.mesh.cp},
               {"fsdp", plan.fsdp}};
  j["parameter_count"] = plan.parameter_count;
  j["seq_len"] = config.training.seq_len;
  j["local_seq_len"] = plan.local_seq_len;
  j["local_batch_size"] = config.training.local_batch_size;
  j["mixed_precision_param"] = DtypeName(config.training.mixed_precision_param);
  j["activation_checkpoint"] = AcName(plan.ac_every);
  j["bytes"] = {{"parameters", plan.parameters},
                {"gradients", plan.gradients},
                {"held_gradients", plan.held_gradients},
                {"optimizer_state", plan.optimizer_state},
                {"gathered_parameters", plan.gathered_parameters},
                {"activations", plan.activations},
                {"ring_buffers", plan.ring_buffers},
                {"ulysses_buffers", plan.ulysses_buffers},
                {"largest_transient", plan.largest_transient},
                {"total", plan.total}};
  j["context_parallel_method"] = ChoiceName(config.parallelism.context_parallel_method);
  j["ulysses_degree"] = plan.mesh.ulysses;
  j["attention_bytes_per_step"] = plan.attention_bytes_per_step;
  j["methods"] = nlohmann::json::array();
  for (const MethodPlan& m : PlanMethods(config, plan.mesh, DeviceOf(flags))) {
    j["methods"].push_back({{"method", ChoiceName(m.method)},
                            {"ulysses_degree", m.ulysses},
                            {"total", m.plan.total},
                            {"fits", m.plan.Fits(device)},
                            {"attention_bytes_per_step", m.plan.attention_bytes_per_step}});
  }
  j["checkpoint"] = {{"writers", plan.checkpoint_writers},
                     {"bytes_written_per_rank", plan.checkpoint_bytes_written},
                     {"host_memory_per_rank", plan.checkpoint_host_memory},
                     {"async_mode", ChoiceName(config.checkpoint.async_mode)}};
  j["largest_transient"] = plan.largest_transient_what;
  j["peak_phase"] = plan.peak_phase;
  j["device_memory_bytes"] = device;
  j["fits"] = plan.Fits(device);
  j["largest_fitting_seq_len"] = largest_seq;
  if (fit != nullptr) {
    j["smallest_fitting"] = {{"context_parallel_degree", fit->cp.degree},
                             {"context_parallel_world", fit->cp.world},
                             {"data_parallel_shard_degree", fit->shard.degree},
                             {"data_parallel_shard_world", fit->shard.world}};
  }
  return j;
}

std::string PlanTable(const PlanFlags& flags, const JobConfig& config, int64_t world,
                      const MemoryPlan& plan, int64_t device, int64_t largest_seq,
                      const FittingDegrees* fit, int64_t raised_max_seq_len) {
  const MeshDegrees& m = plan.mesh;
  const int64_t F = plan.fsdp;
  std::string out;
  if (raised_max_seq_len > 0) {
    absl::StrAppend(&out, "note: training.seq_len ", config.training.seq_len,
                    " is above the config's model.max_seq_len; planned with model.max_seq_len = ",
                    raised_max_seq_len, " (submit with --model.max_seq_len=", raised_max_seq_len,
                    ")\n");
  }
  out += absl::StrFormat(
      "%s on %d ranks: replicate %d × shard %d × cp %d (%s)\n"
      "model %s parameters; seq_len %d (%d per rank), batch %d, %s, activation checkpoint %s\n",
      flags.config, world, m.replicate, m.shard, m.cp,
      F > 1 ? absl::StrCat("FSDP over ", F) : std::string("replicated weights"),
      absl::StrFormat("%.3fB", double(plan.parameter_count) / 1e9), config.training.seq_len,
      plan.local_seq_len, config.training.local_batch_size,
      DtypeName(config.training.mixed_precision_param), AcName(plan.ac_every));
  const std::string shard = F > 1 ? absl::StrCat(" (1/", F, ")") : "";
  std::vector<std::vector<std::string>> rows = {
      {"parameters", Bytes(plan.parameters), "float32 master weights" + shard},
      {"gradients", Bytes(plan.gradients), "float32" + shard},
      {"optimizer state", Bytes(plan.optimizer_state),
       "AdamW exp_avg + exp_avg_sq, float32" + shard},
      {"gathered parameters", Bytes(plan.gathered_parameters),
       F > 1 ? "full units in the param dtype" : "bf16 weight casts kept for the backward"},
      {"activations", Bytes(plan.activations), "saved for the backward"},
      {"ring buffers", Bytes(plan.ring_buffers), "K/V blocks and dK/dV accumulators in flight"},
      {"ulysses buffers", Bytes(plan.ulysses_buffers),
       "all-to-all buffers: the group's sequence for this rank's heads"},
      {"largest transient", Bytes(plan.largest_transient), plan.largest_transient_what},
      {"peak", Bytes(plan.total), plan.peak_phase},
  };
  if (plan.held_gradients > 0) {
    rows.insert(rows.begin() + 2,
                {"held gradients", Bytes(plan.held_gradients),
                 "unsharded float32, between micro-batches (fsdp_gradient_sync)"});
  }
  out += FormatTable({"PER RANK", "BYTES", "WHAT"}, rows);
  if (plan.Fits(device)) {
    absl::StrAppend(&out, "fits ", Bytes(device), " (", Bytes(device - plan.total), " to spare)\n");
  } else {
    absl::StrAppend(&out, "does NOT fit ", Bytes(device), " (", Bytes(plan.total - device),
                    " over); ", fit != nullptr ? FittingAdvice(*fit) : "\n");
  }
  absl::StrAppend(&out, "checkpoint save: ", Bytes(plan.checkpoint_bytes_written),
                  " written by each of ", plan.checkpoint_writers,
                  " ranks (weights + AdamW state, float32); host memory per rank: ",
                  Bytes(plan.checkpoint_host_memory),
                  config.checkpoint.async_mode == AsyncMode::kAsync
                      ? " of async staging, reused between saves\n"
                      : " of staging on a GPU (none for a CPU sync save)\n");
  const std::vector<MethodPlan> methods = PlanMethods(config, m, DeviceOf(flags));
  if (!methods.empty()) {
    absl::StrAppend(&out, "context-parallel attention sends ", Bytes(plan.attention_bytes_per_step),
                    " per rank per step (causal; a document mask sends less); by method:\n");
    std::vector<std::vector<std::string>> by_method;
    for (const MethodPlan& method : methods) {
      const bool chosen = method.method == config.parallelism.context_parallel_method &&
                          method.ulysses == m.ulysses;
      by_method.push_back({MethodName(method, m.cp) + (chosen ? " *" : ""),
                           Bytes(method.plan.total), Bytes(method.plan.attention_bytes_per_step),
                           method.plan.Fits(device) ? "yes" : "no"});
    }
    out += FormatTable({"CP METHOD", "PEAK", "SENT PER STEP", "FITS"}, by_method);
  }
  if (largest_seq > 0) {
    absl::StrAppend(&out, "largest seq_len that fits: ", largest_seq, "\n");
  } else {
    absl::StrAppend(&out, "no seq_len fits, not even the shortest the mesh allows\n");
  }
  return out;
}

}  // namespace

CLI::App* AddPlanCommand(CLI::App& app, PlanFlags* flags) {
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Per-rank memory of a training step, from the config alone: weights, gradients, optimizer "
      "state, activations, ring buffers, the largest transient and the peak; whether it fits the "
      "device, and the largest seq_len that does.");
  cmd->add_option("CONFIG", flags->config, "The job's TOML config file")->required();
  cmd->add_option("--world", flags->world,
                  "Ranks (default: the config's replicate × shard × cp, -1 read as 1)");
  cmd->add_option("--device-memory", flags->device_memory,
                  "Memory of one rank's device, e.g. 80GiB, 141GB, 85899345920")
      ->capture_default_str();
  cmd->add_option("--device", flags->device,
                  "cuda or cpu: the ranks' device (CPU ranks run the fused RMSNorm, RoPE and "
                  "SwiGLU blocks, which keep less for the backward)")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  cmd->allow_extras();  // the --section.key=value overrides
  cmd->footer(
      "Overrides: any config key as --section.key=value, e.g. --training.seq_len=65536.\n"
      "Example:\n"
      "  ringctl plan configs/llama3_8b.toml --world 8 --parallelism.context_parallel_degree=8 "
      "--device-memory 80GiB");
  flags->plan = cmd;
  return cmd;
}

int RunPlan(const PlanFlags& flags) {
  const absl::StatusOr<int64_t> device = ParseByteSize(flags.device_memory);
  if (!device.ok()) {
    std::cerr << "ringctl plan: --device-memory " << device.status().message() << std::endl;
    return kExitUsage;
  }
  const std::vector<std::string> overrides =
      flags.plan != nullptr ? flags.plan->remaining() : std::vector<std::string>{};
  int64_t raised_max_seq_len = 0;
  absl::StatusOr<JobConfig> config = LoadForPlan(flags.config, overrides, &raised_max_seq_len);
  // model.hf_assets_path: the architecture from its config.json, read here.
  if (config.ok()) {
    if (absl::Status hf = ResolveHfAssets(&*config); !hf.ok()) config = hf;
  }
  if (!config.ok()) {
    std::cerr << "ringctl plan: " << config.status().message() << std::endl;
    return kExitUsage;
  }
  if (flags.world < 1 && flags.plan != nullptr && flags.plan->count("--world") > 0) {
    std::cerr << "ringctl plan: --world " << flags.world << " is not a rank count (give N >= 1)"
              << std::endl;
    return kExitUsage;
  }
  const int64_t world = flags.world > 0 ? flags.world : RequestedWorldSize(*config);
  const absl::StatusOr<MeshDegrees> mesh = ResolveMesh(*config, world);
  if (!mesh.ok()) {
    std::cerr << "ringctl plan: " << mesh.status().message() << std::endl;
    return kExitUsage;
  }
  const MemoryPlan plan = PlanMemory(*config, *mesh, DeviceOf(flags));
  const int64_t largest_seq = LargestFittingSeqLen(*config, *mesh, DeviceOf(flags), *device);
  std::optional<FittingDegrees> fit;
  if (!plan.Fits(*device)) fit = SmallestFittingDegrees(*config, *mesh, DeviceOf(flags), *device);
  const FittingDegrees* advice = fit.has_value() ? &*fit : nullptr;
  if (flags.output == "json") {
    std::cout << PlanJson(flags, *config, world, plan, *device, largest_seq, advice,
                          raised_max_seq_len)
                     .dump()
              << std::endl;
  } else {
    std::cout << PlanTable(flags, *config, world, plan, *device, largest_seq, advice,
                           raised_max_seq_len)
              << std::flush;
  }
  return plan.Fits(*device) ? kExitOk : kExitFailed;
}

}  // namespace ringtrain
