// Hugging Face models in and out, against transformers itself (tests/parity/hf_reference.py on the
// project venv's torch, transformers and safetensors): a random LlamaForCausalLM with GQA, llama3
// RoPE scaling that changes the frequencies at the sequence length used, tied embeddings, an odd
// vocabulary, a head_dim that is not dim / n_heads and an intermediate_size no multiple_of rule
// gives. Eval loss within 1e-5; five AdamW steps with cp = 2 and with FSDP shard 2 × cp 2 within
// 1e-4; the exported folder and ringtrain-convert exact; greedy generation token for token; and the
// refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

constexpr int kSeqLen = 32;

std::string Script() { return SourceDir() + "/tests/parity/hf_reference.py"; }

// Runs the reference; fails the test (and returns false) when it fails.
bool Reference(std::vector<std::string> args) {
  args.insert(args.begin(), {PythonPath(), Script()});
  const CommandResult ran = RunCommand(args);
  EXPECT_EQ(ran.exit_code, 0) << ran.output;
  return ran.exit_code == 0;
}

// A random model in `dir` (save_pretrained) and its tokens in dir/tokens.bin.
bool MakeModel(const std::string& dir, const std::string& dtype = "float32",
               const std::string& max_shard_size = "", const std::string& spelling = "v5") {
  std::vector<std::string> args = {"make-model",
                                   "--out-dir",
                                   dir,
                                   "--seed",
                                   "11",
                                   "--initializer-range",
                                   "0.1",
                                   "--vocab-size",
                                   "301",
                                   "--hidden-size",
                                   "64",
                                   "--intermediate-size",
                                   "150",
                                   "--num-layers",
                                   "2",
                                   "--num-heads",
                                   "4",
                                   "--num-kv-heads",
                                   "2",
                                   "--head-dim",
                                   "24",
                                   "--max-position-embeddings",
                                   "256",
                                   "--rope-theta",
                                   "10000",
                                   "--rms-norm-eps",
                                   "1e-6",
                                   "--rope-scaling",
                                   "llama3",
                                   "--rope-factor",
                                   "8",
                                   "--rope-low-freq-factor",
                                   "1",
                                   "--rope-high-freq-factor",
                                   "4",
                                   "--rope-original-max-position-embeddings",
                                   "32",
                                   "--tie-word-embeddings",
                                   "--dtype",
                                   dtype,
                                   "--config-spelling",
                                   spelling,
                                   "--num-tokens",
                                   "2000"};
  if (!max_shard_size.empty()) {
    args.push_back("--max-shard-size");
    args.push_back(max_shard_size);
  }
  return Reference(args);
}

// A job file whose [model] section names only the Hugging Face folder.
std::string JobFile(const TempDir& tmp, const std::string& hf_dir) {
  const std::string path = tmp / "job.toml";
  WriteFile(path, "[model]\nhf_assets_path = \"" + hf_dir + "\"\n");
  return path;
}

std::vector<std::string> TrainingFlags(const std::string& tokens) {
  return {"--training.seq_len=" + std::to_string(kSeqLen),
          "--training.dataset=bin",
          "--training.dataset_path=" + tokens,
          "--training.max_norm=1.0",
          "--optimizer.lr=0.003",
          "--optimizer.beta1=0.9",
          "--optimizer.beta2=0.95",
          "--optimizer.eps=1e-8",
          "--optimizer.weight_decay=0.1",
          "--lr_scheduler.warmup_steps=0",
          "--lr_scheduler.decay_ratio=0"};
}

// ringtrain's validation loss of the weights in `hf_dir` (2 batches of 2 windows).
double RingtrainEval(const TempDir& tmp, const std::string& hf_dir, const std::string& tokens,
                     const std::vector<std::string>& extra = {}) {
  const std::string jsonl = tmp / "eval.jsonl";
  std::vector<std::string> args = {JobFile(tmp, hf_dir),
                                   "--job.mode=eval",
                                   "--checkpoint.initial_load_path=" + hf_dir,
                                   "--checkpoint.initial_load_in_hf=true",
                                   "--validation.steps=2",
                                   "--validation.local_batch_size=2",
                                   "--metrics.jsonl=" + jsonl};
  for (const std::string& flag : TrainingFlags(tokens)) args.push_back(flag);
  for (const std::string& flag : extra) args.push_back(flag);
  const CommandResult ran = RunCommand(TrainerCommand(args));
  EXPECT_EQ(ran.exit_code, 0) << ran.output;
  if (ran.exit_code != 0) return NAN;
  return std::stod(ReadJsonl(jsonl).at(0).at("validation_loss"));
}

double ReferenceEval(const TempDir& tmp, const std::string& hf_dir, const std::string& tokens) {
  const std::string out = tmp / "reference_eval.json";
  if (!Reference({"eval", "--model", hf_dir, "--tokens", tokens, "--seq-len",
                  std::to_string(kSeqLen), "--batch", "2", "--steps", "2", "--out", out})) {
    return NAN;
  }
  return nlohmann::json::parse(ReadFile(out))["validation_loss"].get<double>();
}

struct Format {
  std::string name, dtype, max_shard_size, spelling;
};

class HfEvalTest : public ::testing::TestWithParam<Format> {};

TEST_P(HfEvalTest, EvalLossMatchesTransformers) {
  const Format f = GetParam();
  TempDir tmp;
  const std::string hf = tmp / "hf";
  ASSERT_TRUE(MakeModel(hf, f.dtype, f.max_shard_size, f.spelling));
  const auto info = nlohmann::json::parse(ReadFile(hf + "/reference_info.json"));
  std::printf("%s\n", info.dump().c_str());
  if (!f.max_shard_size.empty()) {
    ASSERT_EQ(RunCommand({"/usr/bin/test", "-f", hf + "/model.safetensors.index.json"}).exit_code,
              0)
        << "the fixture should be sharded";
  }
  const double ours = RingtrainEval(tmp, hf, hf + "/tokens.bin");
  const double theirs = ReferenceEval(tmp, hf, hf + "/tokens.bin");
  std::printf("%s: eval loss ringtrain %.9f transformers %.9f |Δ| %.2e\n", f.name.c_str(), ours,
              theirs, std::fabs(ours - theirs));
  EXPECT_NEAR(ours, theirs, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Formats, HfEvalTest,
                         ::testing::Values(Format{"float32_v5", "float32", "", "v5"},
                                           Format{"bfloat16_sharded_v4", "bfloat16", "40KB", "v4"},
                                           Format{"float16_v4", "float16", "", "v4"}),
                         [](const auto& info) { return info.param.name; });

struct Mesh {
  std::string name;
  int world;
  std::vector<std::string> flags;
};

class HfTrainTest : public ::testing::TestWithParam<Mesh> {};

TEST_P(HfTrainTest, FiveAdamWStepsMatchTransformers) {
  const Mesh m = GetParam();
  TempDir tmp;
  const std::string hf = tmp / "hf", tokens = hf + "/tokens.bin";
  ASSERT_TRUE(MakeModel(hf));
  const std::string reference = tmp / "reference.json";
  ASSERT_TRUE(Reference({"train",
                         "--model",
                         hf,
                         "--tokens",
                         tokens,
                         "--seq-len",
                         std::to_string(kSeqLen),
                         "--batch",
                         "2",
                         "--steps",
                         "5",
                         "--lr",
                         "0.003",
                         "--beta1",
                         "0.9",
                         "--beta2",
                         "0.95",
                         "--eps",
                         "1e-8",
                         "--weight-decay",
                         "0.1",
                         "--max-norm",
                         "1.0",
                         "--out",
                         reference}));

  const std::string jsonl = tmp / "train.jsonl";
  std::vector<std::string> args = {JobFile(tmp, hf), "--checkpoint.initial_load_path=" + hf,
                                   "--checkpoint.initial_load_in_hf=true", "--training.steps=5",
                                   "--metrics.jsonl=" + jsonl};
  for (const std::string& flag : TrainingFlags(tokens)) args.push_back(flag);
  for (const std::string& flag : m.flags) args.push_back(flag);
  const CommandResult ran = RunCommand(LauncherCommand(m.world, args));
  ASSERT_EQ(ran.exit_code, 0) << ran.output;

  const auto expected = nlohmann::json::parse(ReadFile(reference))["steps"];
  const std::vector<double> losses = ReadLosses(jsonl);
  const std::vector<std::string> norms = ReadJsonlColumn(jsonl, "grad_norm");
  ASSERT_EQ(losses.size(), 5u);
  ASSERT_EQ(expected.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const double loss = expected[i]["loss"].get<double>();
    const double norm = expected[i]["grad_norm"].get<double>();
    std::printf("%s step %zu: loss ringtrain %.9f transformers %.9f |Δ| %.2e, grad_norm |Δ| %.2e\n",
                m.name.c_str(), i + 1, losses[i], loss, std::fabs(losses[i] - loss),
                std::fabs(std::stod(norms[i]) - norm));
    EXPECT_NEAR(losses[i], loss, 1e-4) << "step " << i + 1;
    EXPECT_NEAR(std::stod(norms[i]), norm, 1e-4) << "step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, HfTrainTest,
                         ::testing::Values(Mesh{"cp2",
                                                2,
                                                {"--parallelism.context_parallel_degree=2",
                                                 "--training.local_batch_size=2"}},
                                           Mesh{"fsdp2_cp2",
                                                4,
                                                {"--parallelism.context_parallel_degree=2",
                                                 "--parallelism.data_parallel_shard_degree=2",
                                                 "--parallelism.data_parallel_replicate_degree=1",
                                                 "--training.local_batch_size=1"}}),
                         [](const auto& info) { return info.param.name; });

// Train two steps, export step-2/hf, and check: transformers' eval loss of the export equals
// ringtrain's of the checkpoint; ringtrain-convert both ways gives back the same bytes.
TEST(HfExportTest, ExportLoadsInTransformersAndConvertsBackBitwise) {
  TempDir tmp;
  const std::string hf = tmp / "hf", tokens = hf + "/tokens.bin", ckpt = tmp / "ckpt";
  ASSERT_TRUE(MakeModel(hf));
  std::vector<std::string> args = {JobFile(tmp, hf),
                                   "--checkpoint.initial_load_path=" + hf,
                                   "--checkpoint.initial_load_in_hf=true",
                                   "--training.steps=2",
                                   "--training.local_batch_size=2",
                                   "--checkpoint.enable=true",
                                   "--checkpoint.folder=" + ckpt,
                                   "--checkpoint.interval=2",
                                   "--checkpoint.last_save_in_hf=true",
                                   "--checkpoint.hf_max_shard_size=60KB"};
  for (const std::string& flag : TrainingFlags(tokens)) args.push_back(flag);
  const CommandResult trained = RunCommand(TrainerCommand(args));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string step = ckpt + "/step-2", exported = step + "/hf";

  // The export in transformers ≈ the checkpoint in ringtrain.
  const std::string model_pt = tmp / "model.pt";
  const CommandResult to_pt =
      RunCommand({BinDir() + "/ringtrain-convert", "to-pt", step, model_pt});
  ASSERT_EQ(to_pt.exit_code, 0) << to_pt.output;
  const std::string jsonl = tmp / "eval.jsonl";
  std::vector<std::string> eval = {JobFile(tmp, hf),
                                   "--job.mode=eval",
                                   "--checkpoint.initial_load_path=" + model_pt,
                                   "--validation.steps=2",
                                   "--validation.local_batch_size=2",
                                   "--metrics.jsonl=" + jsonl};
  for (const std::string& flag : TrainingFlags(tokens)) eval.push_back(flag);
  const CommandResult evaluated = RunCommand(TrainerCommand(eval));
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.output;
  const double ours = std::stod(ReadJsonl(jsonl).at(0).at("validation_loss"));
  const double theirs = ReferenceEval(tmp, exported, tokens);
  std::printf("exported: eval loss ringtrain %.9f transformers %.9f |Δ| %.2e\n", ours, theirs,
              std::fabs(ours - theirs));
  EXPECT_NEAR(ours, theirs, 1e-5);

  // Back: the export's tensors are the checkpoint's, bit for bit.
  const std::string back = tmp / "back";
  const CommandResult from =
      RunCommand({BinDir() + "/ringtrain-convert", "from-hf", exported, back});
  ASSERT_EQ(from.exit_code, 0) << from.output;
  const CommandResult same_pt =
      RunCommand({PythonPath(), "-c",
                  "import sys, torch\n"
                  "a = torch.load(sys.argv[1], weights_only=True)\n"
                  "b = torch.load(sys.argv[2], weights_only=True)\n"
                  "assert list(a) == list(b), (list(a), list(b))\n"
                  "for k in a: assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k\n",
                  model_pt, back + "/model.pt"});
  EXPECT_EQ(same_pt.exit_code, 0) << same_pt.output;

  // And out again after the fact: ringtrain-convert to-hf gives the trainer's export, byte for
  // byte in every tensor.
  const std::string again = tmp / "again";
  const CommandResult to = RunCommand(
      {BinDir() + "/ringtrain-convert", "to-hf", step, again, "--max-shard-size", "60KB"});
  ASSERT_EQ(to.exit_code, 0) << to.output;
  EXPECT_TRUE(Reference({"same-weights", "--a", exported, "--b", again}));
}

TEST(HfGenerateTest, GreedyTokensMatchTransformers) {
  TempDir tmp;
  const std::string hf = tmp / "hf";
  ASSERT_TRUE(MakeModel(hf));
  const std::string reference = tmp / "generate.json";
  ASSERT_TRUE(Reference({"generate", "--model", hf, "--prompt-text", "hello", "--max-new-tokens",
                         "32", "--out", reference}));
  const CommandResult ran = RunCommand({BinDir() + "/ringtrain-generate", "--hf", hf, "--prompt",
                                        "hello", "--max-new-tokens", "32", "--ids"});
  ASSERT_EQ(ran.exit_code, 0) << ran.output;
  const size_t at = ran.output.find("ids: ");
  ASSERT_NE(at, std::string::npos) << ran.output;
  std::vector<int64_t> ids;
  std::istringstream line(ran.output.substr(at + 5, ran.output.find('\n', at) - at - 5));
  for (int64_t id; line >> id;) ids.push_back(id);
  const auto expected =
      nlohmann::json::parse(ReadFile(reference))["new_ids"].get<std::vector<int64_t>>();
  ASSERT_EQ(expected.size(), 32u);
  EXPECT_EQ(ids, expected);

  // Sampling: a seed repeats itself, another seed differs, and a top-p so small that only the most
  // likely token is left is greedy again.
  auto sample = [&](const std::string& seed, const std::string& top_p) {
    const CommandResult r = RunCommand({BinDir() + "/ringtrain-generate", "--hf", hf, "--prompt",
                                        "hello", "--max-new-tokens", "32", "--temperature", "1.5",
                                        "--top-p", top_p, "--seed", seed, "--ids"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t from = r.output.find("ids: ");
    return from == std::string::npos ? std::string()
                                     : r.output.substr(from, r.output.find('\n', from) - from);
  };
  const std::string seed1 = sample("1", "1.0");
  EXPECT_EQ(sample("1", "1.0"), seed1);
  EXPECT_NE(sample("2", "1.0"), seed1);
  EXPECT_EQ(sample("3", "1e-9"), ran.output.substr(at, ran.output.find('\n', at) - at));
}

// What cannot be trained is refused with the field or tensor named, and how.
TEST(HfRefusalTest, ContradictionsUnsupportedFieldsMissingTensorsAndCorruptFiles) {
  TempDir tmp;
  const std::string hf = tmp / "hf", tokens = hf + "/tokens.bin";
  ASSERT_TRUE(MakeModel(hf));
  auto eval = [&](const std::string& dir, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {JobFile(tmp, dir),
                                     "--job.mode=eval",
                                     "--checkpoint.initial_load_path=" + dir,
                                     "--checkpoint.initial_load_in_hf=true",
                                     "--validation.steps=1",
                                     "--validation.local_batch_size=1"};
    for (const std::string& flag : TrainingFlags(tokens)) args.push_back(flag);
    for (const std::string& flag : extra) args.push_back(flag);
    return RunCommand(TrainerCommand(args));
  };
  // A [model] key against config.json: a config error (2) naming both values.
  const CommandResult contradiction = eval(hf, {"--model.dim=128"});
  EXPECT_EQ(contradiction.exit_code, 2) << contradiction.output;
  EXPECT_NE(contradiction.output.find("model.dim = 128 contradicts hidden_size = 64"),
            std::string::npos)
      << contradiction.output;

  // A field ringtrain cannot honour.
  const std::string gelu = tmp / "gelu";
  ASSERT_EQ(RunCommand({"/bin/cp", "-r", hf, gelu}).exit_code, 0);
  auto config = nlohmann::json::parse(ReadFile(gelu + "/config.json"));
  config["hidden_act"] = "gelu";
  WriteFile(gelu + "/config.json", config.dump());
  const CommandResult unsupported = eval(gelu, {});
  EXPECT_EQ(unsupported.exit_code, 2) << unsupported.output;
  EXPECT_NE(unsupported.output.find("hidden_act = \"gelu\""), std::string::npos)
      << unsupported.output;

  // A tensor missing from the file.
  const std::string missing = tmp / "missing";
  ASSERT_EQ(RunCommand({"/bin/cp", "-r", hf, missing}).exit_code, 0);
  const CommandResult dropped =
      RunCommand({PythonPath(), "-c",
                  "import sys\nfrom safetensors.torch import load_file, save_file\n"
                  "t = load_file(sys.argv[1])\ndel t['model.layers.1.mlp.up_proj.weight']\n"
                  "save_file(t, sys.argv[1], metadata={'format': 'pt'})\n",
                  missing + "/model.safetensors"});
  ASSERT_EQ(dropped.exit_code, 0) << dropped.output;
  const CommandResult no_tensor = eval(missing, {});
  EXPECT_NE(no_tensor.exit_code, 0);
  EXPECT_NE(no_tensor.output.find("missing: model.layers.1.mlp.up_proj.weight"), std::string::npos)
      << no_tensor.output;

  // A corrupt header: a header length beyond the file.
  const std::string corrupt = tmp / "corrupt";
  ASSERT_EQ(RunCommand({"/bin/cp", "-r", hf, corrupt}).exit_code, 0);
  const CommandResult broke = RunCommand(
      {PythonPath(), "-c",
       "import sys\nf = open(sys.argv[1], 'r+b')\nf.write((1 << 40).to_bytes(8, 'little'))\n",
       corrupt + "/model.safetensors"});
  ASSERT_EQ(broke.exit_code, 0) << broke.output;
  const CommandResult bad_header = eval(corrupt, {});
  EXPECT_EQ(bad_header.exit_code, 1) << bad_header.output;
  EXPECT_NE(bad_header.output.find(corrupt + "/model.safetensors"), std::string::npos)
      << bad_header.output;
}

}  // namespace
}  // namespace ringtrain::testing
