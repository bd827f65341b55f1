// The C++ trainer against an independent plain-PyTorch implementation (tests/parity/
// llama_reference.py, run on the project venv's torch, whose LibTorch the build links): same state
// dict, same .bin tokens, three AdamW steps. Loss and gradient norm must agree within 1e-5 per
// step.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

struct Shape {
  std::string name;
  int dim, n_layers, n_heads, n_kv_heads, vocab, multiple_of;
  std::string ffn_dim_multiplier;  // empty = unset
  std::string dtype;               // of the saved state dict
};

class ParityTest : public ::testing::TestWithParam<Shape> {};

TEST_P(ParityTest, LossesAndGradNormsMatchPyTorch) {
  const Shape s = GetParam();
  const auto torch_ok = RunCommand({PythonPath(), "-c", "import torch"});
  ASSERT_EQ(torch_ok.exit_code, 0)
      << "the venv's torch is needed for this test (scripts/setup.sh installs it):\n"
      << torch_ok.output;
  TempDir dir;
  const std::string script = SourceDir() + "/tests/parity/llama_reference.py";
  std::vector<std::string> model = {"--dim",         std::to_string(s.dim),
                                    "--n-layers",    std::to_string(s.n_layers),
                                    "--n-heads",     std::to_string(s.n_heads),
                                    "--n-kv-heads",  std::to_string(s.n_kv_heads),
                                    "--vocab-size",  std::to_string(s.vocab),
                                    "--multiple-of", std::to_string(s.multiple_of),
                                    "--norm-eps",    "1e-5",
                                    "--rope-theta",  "10000"};
  if (!s.ffn_dim_multiplier.empty()) {
    model.push_back("--ffn-dim-multiplier");
    model.push_back(s.ffn_dim_multiplier);
  }
  std::vector<std::string> fixture = {PythonPath(), script, "make-fixture", "--out-dir", dir.path(),
                                      "--seed",     "7",    "--num-tokens", "1200",      "--dtype",
                                      s.dtype};
  fixture.insert(fixture.end(), model.begin(), model.end());
  const auto made = RunCommand(fixture);
  ASSERT_EQ(made.exit_code, 0) << made.output;

  const std::vector<std::string> optim = {"--lr",           "0.01", "--beta1",    "0.9",
                                          "--beta2",        "0.95", "--eps",      "1e-8",
                                          "--weight-decay", "0.1",  "--max-norm", "1.0"};
  std::vector<std::string> reference = {PythonPath(),
                                        script,
                                        "train",
                                        "--init",
                                        dir / "init.pt",
                                        "--tokens",
                                        dir / "tokens.bin",
                                        "--seq-len",
                                        "32",
                                        "--batch",
                                        "4",
                                        "--steps",
                                        "3",
                                        "--out",
                                        dir / "reference.json"};
  reference.insert(reference.end(), optim.begin(), optim.end());
  reference.insert(reference.end(), model.begin(), model.end());
  const auto ref = RunCommand(reference);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;

  std::vector<std::string> trainer = {BinDir() + "/ringtrain-trainer",
                                      ConfigPath("debug_model.toml"),
                                      "--model.dim=" + std::to_string(s.dim),
                                      "--model.n_layers=" + std::to_string(s.n_layers),
                                      "--model.n_heads=" + std::to_string(s.n_heads),
                                      "--model.n_kv_heads=" + std::to_string(s.n_kv_heads),
                                      "--model.vocab_size=" + std::to_string(s.vocab),
                                      "--model.multiple_of=" + std::to_string(s.multiple_of),
                                      "--model.norm_eps=1e-5",
                                      "--model.rope_theta=10000",
                                      "--training.seq_len=32",
                                      "--training.local_batch_size=4",
                                      "--training.steps=3",
                                      "--training.dataset=bin",
                                      "--training.dataset_path=" + (dir / "tokens.bin"),
                                      "--training.max_norm=1.0",
                                      "--optimizer.lr=0.01",
                                      "--optimizer.beta1=0.9",
                                      "--optimizer.beta2=0.95",
                                      "--optimizer.eps=1e-8",
                                      "--optimizer.weight_decay=0.1",
                                      "--lr_scheduler.warmup_steps=0",
                                      "--lr_scheduler.decay_ratio=0",
                                      "--checkpoint.initial_load_path=" + (dir / "init.pt"),
                                      "--checkpoint.enable=true",
                                      "--checkpoint.folder=" + (dir / "ckpt"),
                                      "--checkpoint.interval=3",
                                      "--metrics.jsonl=" + (dir / "trainer.jsonl")};
  if (!s.ffn_dim_multiplier.empty()) {
    trainer.push_back("--model.ffn_dim_multiplier=" + s.ffn_dim_multiplier);
  }
  const auto ran = RunCommand(trainer);
  ASSERT_EQ(ran.exit_code, 0) << ran.output;

  const auto expected = nlohmann::json::parse(ReadFile(dir / "reference.json"))["steps"];
  const auto actual = ReadJsonl(dir / "trainer.jsonl");
  ASSERT_EQ(expected.size(), 3u);
  ASSERT_EQ(actual.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const double loss = std::stod(actual[i].at("loss"));
    const double norm = std::stod(actual[i].at("grad_norm"));
    std::printf("step %zu  loss C++ %.9f  PyTorch %.9f  |Δ| %.2e   grad_norm |Δ| %.2e\n", i + 1,
                loss, expected[i]["loss"].get<double>(),
                std::fabs(loss - expected[i]["loss"].get<double>()),
                std::fabs(norm - expected[i]["grad_norm"].get<double>()));
    EXPECT_NEAR(loss, expected[i]["loss"].get<double>(), 1e-5) << "step " << i + 1;
    EXPECT_NEAR(norm, expected[i]["grad_norm"].get<double>(), 1e-5) << "step " << i + 1;
  }

  // The checkpoint the trainer wrote, as ringtrain-convert to-pt makes it, is a plain state dict
  // for Python, with torchtitan's names, that PyTorch 2.x's safe loader (weights_only=True)
  // accepts.
  const auto converted =
      RunCommand({BinDir() + "/ringtrain-convert", "to-pt", dir / "ckpt/step-3", dir / "model.pt"});
  ASSERT_EQ(converted.exit_code, 0) << converted.output;
  const auto loaded =
      RunCommand({PythonPath(), "-c",
                  "import sys, torch\n"
                  "ours = torch.load(sys.argv[1], weights_only=True)\n"
                  "init = torch.load(sys.argv[2], weights_only=True)\n"
                  "assert isinstance(ours, dict), type(ours)\n"
                  "assert sorted(ours) == sorted(init), (sorted(ours), sorted(init))\n"
                  "for k in init: assert ours[k].shape == init[k].shape and ours[k].dtype == "
                  "torch.float32, k\n",
                  dir / "model.pt", dir / "init.pt"});
  EXPECT_EQ(loaded.exit_code, 0) << loaded.output;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ParityTest,
                         ::testing::Values(Shape{"gqa_float32", 64, 2, 4, 2, 97, 32, "", "float32"},
                                           Shape{"mha_bfloat16_ffn_multiplier", 48, 2, 3, 3, 101,
                                                 16, "1.3", "bfloat16"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ringtrain::testing
