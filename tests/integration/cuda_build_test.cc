// The two builds from the same sources, checked without a GPU: the CUDA build's ringtrain-trainer
// (scripts/test.sh builds it into build-cuda/ with -DRINGTRAIN_CUDA=ON) was produced, links
// libtorch_cuda and NCCL and compiled the NCCL code path; the CPU build's trainer (the one the
// rest of the suite runs) links neither — read with readelf/nm/ldd. The CUDA trainer also runs here
// on the CPU (bitwise like the CPU build) and refuses --device=cuda:0 clearly; nothing CUDA runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {
namespace fs = std::filesystem;

std::string CudaTrainer() { return RINGTRAIN_CUDA_TRAINER; }
std::string CpuTrainer() { return BinDir() + "/ringtrain-trainer"; }

// The DT_NEEDED entries of an ELF file ("libnccl.so.2", ...).
std::set<std::string> Needed(const std::string& binary) {
  const CommandResult r = RunCommand({"/usr/bin/readelf", "--dynamic", "--wide", binary});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::set<std::string> needed;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    const size_t open = line.find("Shared library: [");
    if (open == std::string::npos) continue;
    const size_t start = open + std::string("Shared library: [").size();
    needed.insert(line.substr(start, line.find(']', start) - start));
  }
  return needed;
}

// The dynamic symbols an ELF file imports, demangled.
std::string UndefinedSymbols(const std::string& binary) {
  const CommandResult r =
      RunCommand({"/usr/bin/nm", "--dynamic", "--undefined-only", "--demangle", binary});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

class CudaBuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(CudaTrainer()))
        << CudaTrainer() << " is missing. HINT: scripts/test.sh builds it; by hand: "
        << "BUILD_DIR=build-cuda CMAKE_ARGS='-DRINGTRAIN_CUDA=ON -DRINGTRAIN_BUILD_TESTS=OFF' "
        << "scripts/build.sh --target ringtrain-trainer";
  }
};

TEST_F(CudaBuildTest, TrainerLinksLibtorchCudaAndNccl) {
  const std::set<std::string> needed = Needed(CudaTrainer());
  for (const char* lib : {"libtorch_cuda.so", "libtorch_cpu.so", "libc10.so", "libnccl.so.2"}) {
    EXPECT_TRUE(needed.count(lib)) << CudaTrainer() << " does not link " << lib;
  }
  // Every library resolves (through the wheel's RUNPATHs), NCCL to the wheel's nvidia-nccl or the
  // toolkit's copy.
  const CommandResult ldd = RunCommand({"/usr/bin/ldd", CudaTrainer()});
  ASSERT_EQ(ldd.exit_code, 0) << ldd.output;
  EXPECT_EQ(ldd.output.find("not found"), std::string::npos) << ldd.output;
  EXPECT_NE(ldd.output.find("libnccl.so.2 => /"), std::string::npos) << ldd.output;
  EXPECT_NE(ldd.output.find("libtorch_cuda.so => /"), std::string::npos) << ldd.output;
  EXPECT_NE(ldd.output.find("libc10_cuda.so => /"), std::string::npos) << ldd.output;
}

TEST_F(CudaBuildTest, TrainerCompiledTheNcclCodePath) {
  const std::string symbols = UndefinedSymbols(CudaTrainer());
  EXPECT_NE(symbols.find("c10d::ProcessGroupNCCL::ProcessGroupNCCL("), std::string::npos)
      << "the NCCL backend (parallel/nccl_group.cc) is not in the CUDA trainer";
  EXPECT_NE(symbols.find("ncclGetVersion"), std::string::npos);
}

TEST_F(CudaBuildTest, CpuTrainerLinksNoCudaLibrary) {
  const std::set<std::string> needed = Needed(CpuTrainer());
  EXPECT_TRUE(needed.count("libtorch_cpu.so"));
  for (const char* lib : {"libtorch_cuda.so", "libc10_cuda.so", "libnccl.so.2", "libtorch.so"}) {
    EXPECT_FALSE(needed.count(lib)) << CpuTrainer() << " links " << lib;
  }
  EXPECT_EQ(UndefinedSymbols(CpuTrainer()).find("ProcessGroupNCCL"), std::string::npos);
}

// The CUDA trainer starts here (LibTorch's CUDA libraries load without a GPU or driver) and its
// --help names the CUDA device.
TEST_F(CudaBuildTest, CudaTrainerHelpNamesTheCudaDevice) {
  const CommandResult help = RunCommand({CudaTrainer(), "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("cuda:N"), std::string::npos) << help.output;
}

// On the CPU the CUDA build trains exactly like the CPU build (same sources, same LibTorch): the
// same losses and gradient norms, bitwise. And asked for a GPU this machine lacks, it says so.
TEST_F(CudaBuildTest, CudaTrainerOnTheCpuMatchesTheCpuBuildBitwise) {
  TempDir dir;
  std::vector<std::vector<std::map<std::string, std::string>>> runs;
  for (const std::string& trainer : {CpuTrainer(), CudaTrainer()}) {
    const std::string out = dir / (std::to_string(runs.size()) + ".jsonl");
    const CommandResult r =
        RunCommand({trainer, ConfigPath("debug_model.toml"), "--training.steps=4",
                    "--lr_scheduler.warmup_steps=1", "--metrics.jsonl=" + out});
    ASSERT_EQ(r.exit_code, 0) << trainer << ":\n" << r.output;
    runs.push_back(ReadJsonl(out));
  }
  ASSERT_EQ(runs[0].size(), 4u);
  ASSERT_EQ(runs[1].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(runs[0][i].at("loss"), runs[1][i].at("loss")) << "step " << i + 1;
    EXPECT_EQ(runs[0][i].at("grad_norm"), runs[1][i].at("grad_norm")) << "step " << i + 1;
  }
}

TEST_F(CudaBuildTest, CudaDeviceWithoutAGpuIsAClearError) {
  const CommandResult r =
      RunCommand({CudaTrainer(), ConfigPath("debug_model.toml"), "--device=cuda:0",
                  "--training.steps=2", "--lr_scheduler.warmup_steps=0"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("device 'cuda:0': no CUDA device is usable here"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ringtrain::testing
