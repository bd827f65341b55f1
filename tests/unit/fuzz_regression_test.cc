// Every input committed under fuzz/corpus/<target>/ — the seeds and every crash the fuzzers have
// found — through the same target functions the libFuzzer binaries run (fuzz/fuzz_targets.h), in
// the normal build: each must return with its invariants held, and nothing may throw.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fuzz/fuzz_targets.h"
#include "tests/integration/test_util.h"

namespace ringtrain::fuzz {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;
  std::string (*run)(const uint8_t* data, size_t size);
};

const Target kTargets[] = {
    {"config", FuzzConfig},
    {"admission", FuzzAdmission},
    {"admission_fields", FuzzAdmissionFields},
    {"agent_record", FuzzAgentRecord},
    {"pickle", FuzzPickle},
    {"state_dict", FuzzStateDict},
    {"tokenizer", FuzzTokenizer},
    {"safetensors", FuzzSafetensors},
    {"safetensors_index", FuzzSafetensorsIndex},
};

// Names the target in gtest's messages instead of dumping its bytes.
void PrintTo(const Target& target, std::ostream* out) { *out << target.name; }

fs::path FuzzDir() { return fs::path(testing::SourceDir()) / "fuzz"; }
fs::path CorpusDir() { return FuzzDir() / "corpus"; }

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// fuzz/not_yet_fixed.txt: inputs whose fix is another change's, as "<target>/<file>" lines.
std::set<std::string> NotYetFixed() {
  std::set<std::string> out;
  std::ifstream in(FuzzDir() / "not_yet_fixed.txt");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') out.insert(line);
  }
  return out;
}

TEST(FuzzRegressionTest, EveryNotYetFixedInputExists) {
  for (const std::string& key : NotYetFixed()) {
    EXPECT_TRUE(fs::is_regular_file(CorpusDir() / key))
        << "fuzz/not_yet_fixed.txt names " << key << ", which is not in fuzz/corpus/";
  }
}

TEST(FuzzRegressionTest, EveryCorpusFolderIsATarget) {
  std::set<std::string> folders, names;
  for (const fs::directory_entry& e : fs::directory_iterator(CorpusDir())) {
    if (e.is_directory()) folders.insert(e.path().filename().string());
  }
  for (const Target& t : kTargets) names.insert(t.name);
  EXPECT_EQ(folders, names)
      << "fuzz/corpus/<target>/ and the targets of fuzz/fuzz_targets.h differ";
}

class FuzzCorpusTest : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzCorpusTest, EveryInputHoldsItsInvariants) {
  const fs::path dir = CorpusDir() / GetParam().name;
  std::vector<fs::path> inputs;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) inputs.push_back(e.path());
  }
  std::sort(inputs.begin(), inputs.end());
  ASSERT_FALSE(inputs.empty()) << dir << " holds no inputs: every target needs seeds";
  const std::set<std::string> not_yet_fixed = NotYetFixed();
  for (const fs::path& input : inputs) {
    const std::string key = std::string(GetParam().name) + "/" + input.filename().string();
    if (not_yet_fixed.count(key) != 0) {
      std::cout << "skipped until its fix is merged (fuzz/not_yet_fixed.txt): fuzz/corpus/" << key
                << "\n";
      continue;
    }
    const std::string bytes = ReadFile(input);
    const std::string problem =
        GetParam().run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    EXPECT_EQ(problem, "") << "fuzz/corpus/" << key;
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, FuzzCorpusTest, ::testing::ValuesIn(kTargets),
                         [](const ::testing::TestParamInfo<Target>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ringtrain::fuzz
