// ringtrain-trainer CONFIG.toml [--section.key=value ...]
// One rank of one job. With no rendezvous arguments it runs alone (world 1).
// Exit status (common/trainer_exit.h): 0 done, 1 the run failed, 2 the command line or config was
// rejected, 3 this rank lost contact with a peer (a collective or the rendezvous failed).
#include <malloc.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/config/device.h"
#include "common/config/hf_config.h"
#include "common/config/job_config.h"
#include "common/config/mesh.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/trainer_exit.h"
#include "common/version/version.h"
#include "worker/trainer/tensor_memory.h"
#include "worker/trainer/trainer.h"

namespace {

constexpr char kUsage[] =
    "usage: ringtrain-trainer CONFIG.toml [--section.key=value ...]\n"
    "                         [--rank=R --world-size=N --master-addr=HOST --master-port=PORT]\n"
    "                         [--device=cpu|cuda:N]\n"
    "  Trains (job.mode = train) or evaluates (job.mode = eval) the model the config describes.\n"
    "  Any config key can be overridden, e.g. --training.steps=10 --metrics.jsonl=out.jsonl\n"
    "  Rendezvous (torchrun's convention; flags win over the environment): RANK, WORLD_SIZE,\n"
    "  MASTER_ADDR, MASTER_PORT. Without them the trainer runs alone (world 1).\n"
    "  RINGTRAIN_HOST_ADDRESS: the address other ranks reach this one at (Gloo listens there;\n"
    "  default 127.0.0.1, i.e. every rank on this host).\n"
    "  RINGTRAIN_JSONL_EVERY_RANK=1: every rank writes metrics.jsonl (give each its own path),\n"
    "  not only rank 0.\n"
    "  RINGTRAIN_PROGRESS_FILE=PATH: rewrite PATH every second with the training thread's\n"
    "  progress (the agent's hang detection; common/progress.h).\n"
    "  RINGTRAIN_CONTROL_FILE=PATH: with checkpoint.memory_interval, after a lost peer wait for a\n"
    "  heal instruction in PATH (the agent writes it) and rejoin in place.\n"
    "  RINGTRAIN_HEAL_GENERATION=N: start as the replacement of a lost rank in generation N,\n"
    "  taking its state from a buddy's in-memory snapshot.\n"
    "  Exit status: 0 done, 1 the run failed, 2 the command line or config was rejected,\n"
    "  3 this rank lost contact with a peer.\n"
    "  --version prints the version and the commit it was built from.\n";

// Reads an integer rendezvous setting from `flag_value` or the environment variable `env`.
bool ReadRendezvousInt(const std::string& flag_value, const char* env, int64_t* out,
                       std::string* error) {
  std::string text = flag_value;
  if (text.empty()) {
    const char* value = std::getenv(env);
    if (value == nullptr) return true;
    text = value;
  }
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || parsed < 0) {
    *error = std::string(env) + " = '" + text + "' is not a non-negative integer";
    return false;
  }
  *out = parsed;
  return true;
}

// Keep freed tensor memory in the heap instead of returning it to the kernel: LibTorch allocates
// activations with malloc, and glibc serves large blocks with fresh mmaps whose page faults (and
// the zeroing BLAS then does on them) cost ~3.5x the step time of the debug model.
void KeepFreedMemoryInHeap() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest value glibc accepts
  }
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace

int main(int argc, char** argv) {
  // A write to a peer that died must fail as EPIPE, which Gloo turns into an error and the
  // trainer into exit 3 (a lost peer: a symptom). Killed by SIGPIPE instead, a survivor would look
  // like a cause, and the coordinator would blame the healthy rank and its worker.
  signal(SIGPIPE, SIG_IGN);
  // First, so the agent hears from this process while LibTorch and the rendezvous start.
  if (const char* path = std::getenv("RINGTRAIN_PROGRESS_FILE")) {
    ringtrain::progress::StartHeartbeatFile(path);
  }
  KeepFreedMemoryInHeap();
  // Before any tensor, so every CPU storage is counted (device_memory_peak_bytes on CPU ranks).
  ringtrain::InstallCpuTensorCounter();
  std::string config_path;
  std::vector<std::string> overrides;
  std::map<std::string, std::string> rendezvous_flags;  // "rank" → "3"
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--version") {
      std::puts(ringtrain::VersionLine("ringtrain-trainer").c_str());
      return 0;
    }
    bool is_rendezvous = false;
    for (const char* name : {"rank", "world-size", "master-addr", "master-port", "device"}) {
      const std::string prefix = std::string("--") + name + "=";
      if (arg.rfind(prefix, 0) == 0) {
        rendezvous_flags[name] = arg.substr(prefix.size());
        is_rendezvous = true;
      }
    }
    if (is_rendezvous) continue;
    if (arg.rfind("--", 0) == 0) {
      overrides.push_back(arg);
    } else if (config_path.empty()) {
      config_path = arg;
    } else {
      std::fprintf(stderr, "ringtrain-trainer: unexpected argument '%s' (the config is '%s')\n%s",
                   arg.c_str(), config_path.c_str(), kUsage);
      return 2;
    }
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "ringtrain-trainer: missing CONFIG.toml\n%s", kUsage);
    return 2;
  }
  auto config = ringtrain::LoadJobConfig(config_path, overrides);
  // A Hugging Face model's architecture (model.hf_assets_path): read here, where the path is.
  if (config.ok()) {
    if (absl::Status hf = ringtrain::ResolveHfAssets(&*config); !hf.ok()) config = hf;
  }
  if (!config.ok()) {
    std::fprintf(stderr, "ringtrain-trainer: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  ringtrain::RankInfo rank;
  int64_t port = 0;
  std::string error;
  if (!ReadRendezvousInt(rendezvous_flags["rank"], "RANK", &rank.rank, &error) ||
      !ReadRendezvousInt(rendezvous_flags["world-size"], "WORLD_SIZE", &rank.world_size, &error) ||
      !ReadRendezvousInt(rendezvous_flags["master-port"], "MASTER_PORT", &port, &error)) {
    std::fprintf(stderr, "ringtrain-trainer: %s\n", error.c_str());
    return 2;
  }
  rank.master_port = static_cast<int>(port);
  if (!ReadRendezvousInt("", "RINGTRAIN_HEAL_GENERATION", &rank.heal_generation, &error)) {
    std::fprintf(stderr, "ringtrain-trainer: %s\n", error.c_str());
    return 2;
  }
  if (!rendezvous_flags["device"].empty()) {
    const auto device = ringtrain::ParseDevice(rendezvous_flags["device"]);
    if (!device.ok()) {
      std::fprintf(stderr, "ringtrain-trainer: %s\n",
                   std::string(device.status().message()).c_str());
      return 2;
    }
    rank.device = *device;
  }
  if (!rendezvous_flags["master-addr"].empty()) {
    rank.master_addr = rendezvous_flags["master-addr"];
  } else if (const char* addr = std::getenv("MASTER_ADDR")) {
    rank.master_addr = addr;
  }
  if (rank.world_size < 1 || rank.rank >= rank.world_size) {
    std::fprintf(stderr, "ringtrain-trainer: rank %lld is not in a world of size %lld\n",
                 static_cast<long long>(rank.rank), static_cast<long long>(rank.world_size));
    return 2;
  }
  if (rank.world_size > 1 && (rank.master_port <= 0 || rank.master_port > 65535)) {
    std::fprintf(stderr, "ringtrain-trainer: a world of %lld ranks needs MASTER_PORT (1-65535)\n",
                 static_cast<long long>(rank.world_size));
    return 2;
  }
  const absl::StatusOr<ringtrain::MeshDegrees> mesh =
      ringtrain::ResolveMesh(*config, rank.world_size);
  if (!mesh.ok()) {
    std::fprintf(stderr, "ringtrain-trainer: %s\n", std::string(mesh.status().message()).c_str());
    return 2;
  }
  if (rank.rank == 0) {
    for (const std::string& warning : config->warnings) RT_LOG(Warning) << warning;
  }
  auto trainer = ringtrain::Trainer::Create(*config, *mesh, rank);
  if (!trainer.ok()) {
    RT_LOG(Error) << trainer.status().message();
    return ringtrain::TrainerExitCode(trainer.status());
  }
  const absl::Status status = (*trainer)->Run();
  if (!status.ok()) RT_LOG(Error) << status.message();
  return ringtrain::TrainerExitCode(status);
}
