// The GPU check's plumbing on the CPU: scripts/gpu_bundle.sh packs both builds into a bundle, and
// the bundle's tests/gpu/check.sh runs every step of the GPU check with --device cpu --self-test
// (small shapes; the CPU stands where CUDA would be) and prints its table; it refuses a torch of
// another version. Needs the CUDA build's ringtrain-gpu-check (build-cuda/bin), which
// scripts/test.sh builds; the tests skip, naming it, only when that binary is missing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

const std::string kCudaBuildDir = RINGTRAIN_CUDA_BUILD_DIR;

class GpuCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string gpu_check = kCudaBuildDir + "/bin/ringtrain-gpu-check";
    if (!fs::exists(gpu_check)) {
      GTEST_SKIP() << gpu_check << " is missing, so there is no bundle to check. HINT: "
                   << "BUILD_DIR=build-cuda CMAKE_ARGS='-DRINGTRAIN_CUDA=ON "
                   << "-DRINGTRAIN_BUILD_TESTS=OFF' scripts/build.sh --target ringtrain-gpu-check";
    }
    const CommandResult r =
        RunCommand({SourceDir() + "/scripts/gpu_bundle.sh", "--out", bundle(), "--build-dir",
                    fs::path(BinDir()).parent_path().string(), "--cuda-build-dir", kCudaBuildDir,
                    "--python", PythonPath()});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_NE(r.output.find("MiB"), std::string::npos) << r.output;  // it prints the size
  }

  std::string bundle() const { return dir_ / "bundle"; }

  CommandResult Check(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {bundle() + "/tests/gpu/check.sh", "--python", PythonPath(),
                                     "--out", dir_ / "out"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv);
  }

  TempDir dir_;
};

TEST_F(GpuCheckTest, BundleHoldsTheBinariesTheirLibrariesAndTheManifest) {
  for (const char* f :
       {"bin/ringtrain-trainer", "bin/ringtrain-gpu-check", "bin/ringtrain-run",
        "lib/libtomlplusplus.so.3", "lib/libabsl_status.so.20220623", "lib/cxx/libstdc++.so.6",
        "configs/debug_model.toml", "tests/gpu/check.sh", "tests/gpu/run_checks.py",
        "tests/gpu/eager_llama.py", "tests/parity/llama_reference.py", "MANIFEST"}) {
    EXPECT_TRUE(fs::exists(bundle() + "/" + f)) << f;
  }
  uintmax_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(bundle())) {
    if (e.is_regular_file()) bytes += e.file_size();
    // Nothing LibTorch, CUDA or glibc: the GPU machine's own copies are the ones to use.
    const std::string name = e.path().filename().string();
    for (const char* prefix :
         {"libtorch", "libc10", "libcuda", "libcudart", "libnccl", "libc.so", "libm.so"}) {
      EXPECT_NE(name.rfind(prefix, 0), 0u) << e.path();
    }
  }
  EXPECT_LT(bytes, 64u << 20);
  EXPECT_NE(ReadFile(bundle() + "/MANIFEST").find("\ntorch_version=2."), std::string::npos);
}

// Every step runs for real on the CPU and the table comes out; the numbers it compares agree.
TEST_F(GpuCheckTest, SelfTestOnTheCpuPrintsTheTableAndPasses) {
  const CommandResult r = Check({"--device", "cpu", "--self-test"});
  std::printf("%s\n", r.output.c_str());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| # | check | value | tolerance | status | note |"), std::string::npos);
  EXPECT_NE(r.output.find("PASSED"), std::string::npos);

  const json results = json::parse(ReadFile(dir_ / "out/results.json"));
  EXPECT_TRUE(results.at("passed").get<bool>());
  int attention = 0, debug = 0, cp = 0, bench = 0;
  for (const json& row : results.at("rows")) {
    const std::string check = row.at("check");
    const std::string status = row.at("status");
    EXPECT_TRUE(status == "ok" || status == "gap" || status == "info") << row.dump();
    if (check.rfind("attention", 0) == 0) ++attention;
    if (check.find("debug config") != std::string::npos) ++debug;
    if (check.find("cp = 2") != std::string::npos) {
      ++cp;
      EXPECT_EQ(status, "ok") << row.dump();
      if (row.at("value").is_number()) EXPECT_LE(row.at("value").get<double>(), 1e-5);
    }
    if (check.find("tokens/s on cpu") != std::string::npos ||
        check.find("MFU") != std::string::npos || check.find("matmul") != std::string::npos) {
      ++bench;
      EXPECT_TRUE(row.at("value").is_number() && row.at("value").get<double>() > 0) << row.dump();
    }
  }
  EXPECT_GT(attention, 0);
  // fp32 vs cpu, fp32 twice, bf16 vs cpu fp32, bf16 vs cpu bf16, cp = 2 vs cp = 1, ulysses
  // cp = 2 vs cp = 1, block_causal cp = 2 (document balancer) vs cp = 1
  EXPECT_EQ(debug, 7);
  EXPECT_EQ(cp, 3);
  EXPECT_EQ(bench, 5);  // matmul, trainer and eager tokens/s and MFU
  EXPECT_TRUE(fs::exists(dir_ / "out/results.md"));
}

TEST_F(GpuCheckTest, RefusesATorchOfAnotherVersionNamingBoth) {
  const std::string manifest = bundle() + "/MANIFEST";
  std::string text = ReadFile(manifest);
  const size_t at = text.find("\ntorch_version=");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, text.find('\n', at + 1) - at, "\ntorch_version=1.13.1");
  WriteFile(manifest, text);
  const CommandResult version =
      RunCommand({PythonPath(), "-c", "import torch; print(torch.__version__)"});
  ASSERT_EQ(version.exit_code, 0) << version.output;
  const std::string have = version.output.substr(0, version.output.find('\n'));

  const CommandResult r = Check({"--device", "cpu", "--self-test"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("torch versions differ"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("built against torch 1.13.1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("has torch " + have), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "out/results.json")) << "it ran the steps anyway";
}

}  // namespace
}  // namespace ringtrain::testing
