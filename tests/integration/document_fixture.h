// The packed-documents fixture the parity tests of documents and of the context-parallel methods
// share: a small Llama (4 heads, 2 K/V heads), its initial weights (init.pt) and a token stream of
// documents of 1, 1, 7, 60, 3, 1, 25, 2, 90 and 4 tokens ending with EOS 5 (tokens.bin), made by
// tests/parity/llama_reference.py; the reference's 5 AdamW steps (seq_len 48, batch 4, lr 0.01),
// causal or block-causal; and the trainer options that train the same.
#ifndef RINGTRAIN_TESTS_INTEGRATION_DOCUMENT_FIXTURE_H_
#define RINGTRAIN_TESTS_INTEGRATION_DOCUMENT_FIXTURE_H_

#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {

constexpr int kDocumentSteps = 5;
inline const std::string kDocumentEos = "5";

// The model, as llama_reference.py's flags.
inline const std::vector<std::string>& DocumentModelFlags() {
  static const std::vector<std::string> flags = {
      "--dim",        "64", "--n-layers",    "2",  "--n-heads",  "4",    "--n-kv-heads", "2",
      "--vocab-size", "97", "--multiple-of", "32", "--norm-eps", "1e-5", "--rope-theta", "10000"};
  return flags;
}

// init.pt and tokens.bin into `dir`. Windows of 48 start mid-document, and chunks at cp 4 (6
// tokens) hold several documents or a part of one.
inline CommandResult MakeDocumentFixture(const std::string& dir) {
  std::vector<std::string> argv = {PythonPath(),
                                   SourceDir() + "/tests/parity/llama_reference.py",
                                   "make-fixture",
                                   "--out-dir",
                                   dir,
                                   "--seed",
                                   "3",
                                   "--num-tokens",
                                   "1200",
                                   "--eos-id",
                                   kDocumentEos,
                                   "--doc-lengths",
                                   "1,1,7,60,3,1,25,2,90,4"};
  argv.insert(argv.end(), DocumentModelFlags().begin(), DocumentModelFlags().end());
  return RunCommand(argv);
}

// The reference's steps on the fixture in `dir` into `dir`/`out` (JSON), block-causal when
// `documents`.
inline CommandResult TrainDocumentReference(const std::string& dir, const std::string& out,
                                            bool documents) {
  std::vector<std::string> argv = {PythonPath(),
                                   SourceDir() + "/tests/parity/llama_reference.py",
                                   "train",
                                   "--init",
                                   dir + "/init.pt",
                                   "--tokens",
                                   dir + "/tokens.bin",
                                   "--seq-len",
                                   "48",
                                   "--batch",
                                   "4",
                                   "--steps",
                                   std::to_string(kDocumentSteps),
                                   "--lr",
                                   "0.01",
                                   "--out",
                                   dir + "/" + out};
  if (documents) argv.insert(argv.end(), {"--eos-id", kDocumentEos});
  argv.insert(argv.end(), DocumentModelFlags().begin(), DocumentModelFlags().end());
  return RunCommand(argv);
}

// The trainer's options for the fixture in `dir`: its model, data and optimizer (plain causal).
inline std::vector<std::string> DocumentTrainerOptions(const std::string& dir) {
  return {ConfigPath("debug_model.toml"),
          "--model.dim=64",
          "--model.n_layers=2",
          "--model.n_heads=4",
          "--model.n_kv_heads=2",
          "--model.vocab_size=97",
          "--model.multiple_of=32",
          "--model.norm_eps=1e-5",
          "--model.rope_theta=10000",
          "--training.seq_len=48",
          "--training.local_batch_size=4",
          "--training.steps=" + std::to_string(kDocumentSteps),
          "--training.dataset=bin",
          "--training.dataset_path=" + dir + "/tokens.bin",
          "--optimizer.lr=0.01",
          "--lr_scheduler.warmup_steps=0",
          "--lr_scheduler.decay_ratio=0",
          "--checkpoint.initial_load_path=" + dir + "/init.pt"};
}

// `key` of every step of the reference's JSON at `path`.
inline std::vector<double> ReferenceColumn(const std::string& path, const std::string& key) {
  std::vector<double> values;
  const nlohmann::json reference = nlohmann::json::parse(ReadFile(path));
  for (const auto& s : reference.at("steps")) values.push_back(s[key].get<double>());
  return values;
}

// `key` of every record of a trainer's JSONL, as numbers.
inline std::vector<double> Column(const std::string& path, const std::string& key) {
  std::vector<double> values;
  for (const std::string& v : ReadJsonlColumn(path, key)) values.push_back(std::stod(v));
  return values;
}

// Step by step within `tol`, and the largest difference printed under `what`.
inline void ExpectWithin(const std::vector<double>& got, const std::vector<double>& want,
                         double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol) << what << " step " << i + 1;
  }
  std::printf("%-44s max |diff| %.3e\n", what.c_str(), MaxDiff(got, want));
}

}  // namespace ringtrain::testing

#endif  // RINGTRAIN_TESTS_INTEGRATION_DOCUMENT_FIXTURE_H_
