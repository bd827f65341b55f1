// ringtrain-trainer CONFIG.toml [--section.key=value ...]
// One rank of one job. With no rendezvous arguments it runs alone (world 1).
// Exit status: 0 done, 1 the run failed, 2 the command line or config was rejected.
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/config/job_config.h"
#include "common/log.h"
#include "worker/trainer/trainer.h"

namespace {

constexpr char kUsage[] =
    "usage: ringtrain-trainer CONFIG.toml [--section.key=value ...]\n"
    "  Trains (job.mode = train) or evaluates (job.mode = eval) the model the config describes.\n"
    "  Any config key can be overridden, e.g. --training.steps=10 --metrics.jsonl=out.jsonl\n";

// Keep freed tensor memory in the heap instead of returning it to the kernel: LibTorch allocates
// activations with malloc, and glibc serves large blocks with fresh mmaps whose page faults (and the
// zeroing BLAS then does on them) cost ~3.5x the step time of the debug model.
void KeepFreedMemoryInHeap() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest value glibc accepts
  }
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace

int main(int argc, char** argv) {
  KeepFreedMemoryInHeap();
  std::string config_path;
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
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
  const auto config = ringtrain::LoadJobConfig(config_path, overrides);
  if (!config.ok()) {
    std::fprintf(stderr, "ringtrain-trainer: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  const absl::Status mesh = ringtrain::ValidateMesh(*config, 1);
  if (!mesh.ok()) {
    std::fprintf(stderr, "ringtrain-trainer: %s\n", std::string(mesh.message()).c_str());
    return 2;
  }
  auto trainer = ringtrain::Trainer::Create(*config, ringtrain::RankInfo{});
  if (!trainer.ok()) {
    RT_LOG(Error) << trainer.status().message();
    return 1;
  }
  const absl::Status status = (*trainer)->Run();
  if (!status.ok()) {
    RT_LOG(Error) << status.message();
    return 1;
  }
  return 0;
}
