// ringtrain-trainer end to end on one rank: determinism, resume, convergence, evaluation, and bad
// input. Each test runs the real binary.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;

std::string Trainer() { return BinDir() + "/ringtrain-trainer"; }

// The debug config, shortened: a constant-LR window so that step counts can change freely.
std::vector<std::string> DebugRun(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {Trainer(), ConfigPath("debug_model.toml"),
                                   "--lr_scheduler.warmup_steps=2", "--lr_scheduler.decay_ratio=0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

TEST(TrainerTest, SameConfigTwiceGivesBitwiseEqualLosses) {
  TempDir dir;
  for (const char* name : {"a.jsonl", "b.jsonl"}) {
    const auto r = RunCommand(DebugRun({"--training.steps=8", "--metrics.jsonl=" + (dir / name)}));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const auto a = ReadJsonl(dir / "a.jsonl"), b = ReadJsonl(dir / "b.jsonl");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at("step"), std::to_string(i + 1));
    EXPECT_EQ(a[i].at("loss"), b[i].at("loss")) << "step " << i + 1;
    EXPECT_EQ(a[i].at("grad_norm"), b[i].at("grad_norm")) << "step " << i + 1;
  }
  // 17 significant digits: the text parses back to the exact double.
  const std::string loss = a[0].at("loss");
  EXPECT_EQ(loss, [&] {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", std::strtod(loss.c_str(), nullptr));
    return std::string(buf);
  }());
}

TEST(TrainerTest, ResumeFromMidRunCheckpointReproducesRemainingLossesBitwise) {
  TempDir dir;
  const auto full = RunCommand(
      DebugRun({"--training.steps=12", "--checkpoint.enable=true",
                "--checkpoint.folder=" + (dir / "ckpt"), "--checkpoint.interval=6",
                "--checkpoint.keep_latest_k=0", "--metrics.jsonl=" + (dir / "full.jsonl")}));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  ASSERT_TRUE(fs::exists(dir / "ckpt/step-6/COMPLETE"));
  ASSERT_TRUE(fs::exists(dir / "ckpt/step-12/rank-00000.safetensors"));
  // A new run whose folder holds only the mid-run checkpoint resumes at step 7.
  fs::create_directories(dir / "resume");
  fs::copy(dir / "ckpt/step-6", dir / "resume/step-6", fs::copy_options::recursive);
  const auto resumed = RunCommand(DebugRun(
      {"--training.steps=12", "--checkpoint.enable=true", "--checkpoint.folder=" + (dir / "resume"),
       "--checkpoint.interval=6", "--metrics.jsonl=" + (dir / "resumed.jsonl")}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  const auto a = ReadJsonl(dir / "full.jsonl"), b = ReadJsonl(dir / "resumed.jsonl");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(b[i].at("step"), a[6 + i].at("step"));
    EXPECT_EQ(b[i].at("loss"), a[6 + i].at("loss")) << "step " << 7 + i;
    EXPECT_EQ(b[i].at("grad_norm"), a[6 + i].at("grad_norm")) << "step " << 7 + i;
  }
}

// A damaged checkpoint, the only one, stops the resume with a message naming the file (DATA_LOSS,
// exit status 1), never an abort: an RNG state of the wrong size (which torch's set_state would
// throw on), a train_state.json whose step is not a number, a truncated part.
TEST(TrainerTest, ADamagedCheckpointIsNamedNotAnAbort) {
  TempDir dir;
  const auto first =
      RunCommand(DebugRun({"--training.steps=2", "--checkpoint.enable=true",
                           "--checkpoint.folder=" + (dir / "ckpt"), "--checkpoint.interval=2"}));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string state_path = dir / "ckpt/step-2/train_state.json";
  const std::string model_path = dir / "ckpt/step-2/rank-00000.safetensors";
  const std::string good_state = ReadFile(state_path), good_model = ReadFile(model_path);
  const struct {
    std::string file, text, expected;
  } cases[] = {
      {state_path, "{\"step\": 2, \"global_sample\": 16, \"torch_rng_state\": \"0011\"}",
       "\"torch_rng_state\" holds 2 bytes"},
      {state_path, "{\"step\": \"2\", \"global_sample\": 16, \"torch_rng_state\": \"00\"}",
       "\"step\" is not a count"},
      {model_path, good_model.substr(0, good_model.size() / 2), "truncated or replaced"},
  };
  for (const auto& c : cases) {
    WriteFile(state_path, good_state);
    WriteFile(model_path, good_model);
    WriteFile(c.file, c.text);
    const auto r =
        RunCommand(DebugRun({"--training.steps=4", "--checkpoint.enable=true",
                             "--checkpoint.folder=" + (dir / "ckpt"), "--checkpoint.interval=2"}));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(c.file), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
  }
}

// A damaged newest checkpoint (a truncated part) is skipped with a warning naming the file,
// and the run resumes from the one before it, bitwise like the uninterrupted run.
TEST(TrainerTest, ADamagedNewestCheckpointResumesFromTheOneBeforeBitwise) {
  TempDir dir;
  const auto full = RunCommand(DebugRun(
      {"--training.steps=8", "--checkpoint.enable=true", "--checkpoint.folder=" + (dir / "ckpt"),
       "--checkpoint.interval=4", "--metrics.jsonl=" + (dir / "full.jsonl")}));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  fs::create_directories(dir / "resume");
  for (const char* step : {"step-4", "step-8"}) {
    fs::copy(fs::path(dir / "ckpt") / step, fs::path(dir / "resume") / step,
             fs::copy_options::recursive);
  }
  const std::string damaged = dir / "resume/step-8/rank-00000.safetensors";
  fs::resize_file(damaged, fs::file_size(damaged) / 3);
  const auto resumed = RunCommand(DebugRun(
      {"--training.steps=8", "--checkpoint.enable=true", "--checkpoint.folder=" + (dir / "resume"),
       "--checkpoint.interval=4", "--metrics.jsonl=" + (dir / "resumed.jsonl")}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("skipping checkpoint " + (dir / "resume/step-8")),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find(damaged), std::string::npos) << resumed.output;
  const auto a = ReadJsonl(dir / "full.jsonl"), b = ReadJsonl(dir / "resumed.jsonl");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(b[i].at("step"), a[4 + i].at("step"));
    EXPECT_EQ(b[i].at("loss"), a[4 + i].at("loss")) << "step " << 5 + i;
  }
}

TEST(TrainerTest, KeepLatestKPrunesOldCheckpoints) {
  TempDir dir;
  const auto r = RunCommand(DebugRun({"--training.steps=6", "--checkpoint.enable=true",
                                      "--checkpoint.folder=" + (dir / "ckpt"),
                                      "--checkpoint.interval=2", "--checkpoint.keep_latest_k=2"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "ckpt")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-4", "step-6"}));
}

// The debug config's synthetic source has a known entropy rate; 200 steps get within 0.3 nats.
TEST(TrainerTest, DebugModelLearnsTheSyntheticSourceToNearItsEntropyFloor) {
  TempDir dir;
  const auto r = RunCommand({Trainer(), ConfigPath("debug_model.toml"), "--training.steps=200",
                             "--metrics.jsonl=" + (dir / "m.jsonl")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double floor = 1.2130075659799042;  // 1.75 bits: successor probabilities ½, ¼, ⅛, ⅛
  EXPECT_NE(r.output.find("entropy floor of the synthetic source: 1.2130"), std::string::npos);
  const auto records = ReadJsonl(dir / "m.jsonl");
  ASSERT_EQ(records.size(), 200u);
  double last10 = 0;
  for (size_t i = 190; i < 200; ++i) last10 += std::stod(records[i].at("loss")) / 10;
  std::printf("mean loss of steps 191-200: %.4f (floor %.4f, gap %.4f nats)\n", last10, floor,
              last10 - floor);
  EXPECT_LT(last10 - floor, 0.3);
  EXPECT_GT(last10, floor - 0.05);  // no model beats the source's entropy
}

TEST(TrainerTest, EvalModeWritesValidationLoss) {
  TempDir dir;
  const auto r = RunCommand(DebugRun(
      {"--job.mode=eval", "--validation.steps=2", "--metrics.jsonl=" + (dir / "eval.jsonl")}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto records = ReadJsonl(dir / "eval.jsonl");
  ASSERT_EQ(records.size(), 1u);
  const double loss = std::stod(records[0].at("validation_loss"));
  EXPECT_GT(loss, 5.0);  // untrained, near ln(512) = 6.24
  EXPECT_LT(loss, 8.0);
  EXPECT_EQ(records[0].at("tokens"), std::to_string(2 * 8 * 256));
}

TEST(TrainerTest, TextDatasetTrainsOnBytes) {
  TempDir dir;
  fs::create_directories(dir / "corpus/sub");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  WriteFile(dir / "corpus/a.txt", text);
  WriteFile(dir / "corpus/sub/b.txt", "héllo wörld ");
  const auto r = RunCommand(
      DebugRun({"--training.dataset=text", "--training.dataset_path=" + (dir / "corpus"),
                "--model.vocab_size=256", "--training.steps=3", "--training.seq_len=64"}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// ---- Bad input: a clear message, a non-zero exit, nothing half-written. ----

struct BadInput {
  std::string name;
  std::vector<std::string> args;
  std::string expected_message;
};

class TrainerBadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(TrainerBadInputTest, FailsWithAClearMessageAndNoCheckpoint) {
  TempDir dir;
  // An argument "ENV NAME=value" runs the trainer with that variable (through env).
  std::vector<std::string> argv = {"/usr/bin/env"};
  for (const std::string& a : GetParam().args) {
    if (a.rfind("ENV ", 0) == 0) argv.push_back(a.substr(4));
  }
  argv.push_back(Trainer());
  const size_t before_config = argv.size();
  for (std::string a : GetParam().args) {
    if (a.rfind("ENV ", 0) == 0) continue;
    if (a == "CONFIG") a = ConfigPath("debug_model.toml");
    for (size_t p; (p = a.find("$DIR")) != std::string::npos;) a.replace(p, 4, dir.path());
    argv.push_back(a);
    if (argv.size() == before_config + 1) {  // right after the config: a case can override them
      argv.push_back("--checkpoint.enable=true");
      argv.push_back("--checkpoint.folder=" + (dir / "ckpt"));
      argv.push_back("--checkpoint.interval=1");
    }
  }
  if (GetParam().name == "truncated_pt" || GetParam().name == "wrong_state_dict") {
    // A real state dict cut in half.
    const auto ok = RunCommand(
        {PythonPath(), "-c",
         "import torch; torch.save({'w': torch.randn(4096)}, '" + (dir / "w.pt") + "')"});
    ASSERT_EQ(ok.exit_code, 0) << ok.output;
    const std::string bytes = ReadFile(dir / "w.pt");
    WriteFile(dir / "half.pt", bytes.substr(0, bytes.size() / 2));
  }
  if (GetParam().name == "malformed_toml") WriteFile(dir / "bad.toml", "[model\ndim = 3\n");
  const auto r = RunCommand(argv);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(GetParam().expected_message), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "ckpt") && !fs::is_empty(dir / "ckpt")) << "partial checkpoint";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TrainerBadInputTest,
    ::testing::Values(
        BadInput{"malformed_toml", {"$DIR/bad.toml"}, "malformed TOML at line"},
        BadInput{"unknown_key", {"CONFIG", "--training.seqlen=5"}, "training.seqlen"},
        BadInput{"negative_size",
                 {"CONFIG", "--training.local_batch_size=-1"},
                 "training.local_batch_size = -1"},
        BadInput{"zero_layers", {"CONFIG", "--model.n_layers=0"}, "model.n_layers = 0"},
        BadInput{"kv_heads", {"CONFIG", "--model.n_kv_heads=3"}, "model.n_kv_heads = 3"},
        BadInput{"dim_heads", {"CONFIG", "--model.dim=100"}, "model.dim = 100"},
        BadInput{"missing_dataset",
                 {"CONFIG", "--training.dataset=bin", "--training.dataset_path=$DIR/nope.bin"},
                 "nope.bin"},
        BadInput{
            "truncated_pt", {"CONFIG", "--checkpoint.initial_load_path=$DIR/half.pt"}, "half.pt"},
        BadInput{"wrong_state_dict",
                 {"CONFIG", "--checkpoint.initial_load_path=$DIR/w.pt"},
                 "unexpected: w"},
        BadInput{"not_a_device", {"CONFIG", "--device=tpu"}, "'tpu' is not a device"},
        BadInput{
            "unknown_cpu_level",
            {"ENV RINGTRAIN_CPU_ISA=avx1024", "CONFIG"},
            "RINGTRAIN_CPU_ISA=avx1024 is not a level: use baseline, avx2, avx512 or avx512_bf16"},
        BadInput{"unknown_f32_gemm",
                 {"ENV RINGTRAIN_F32_GEMM=fast", "CONFIG"},
                 "RINGTRAIN_F32_GEMM=fast is not a choice: use mkl or brgemm"},
        BadInput{"cuda_on_a_cpu_build", {"CONFIG", "--device=cuda:0"}, "-DRINGTRAIN_CUDA=ON"},
        BadInput{"diverging_lr",
                 {"CONFIG", "--optimizer.lr=1e9", "--training.max_norm=1e9",
                  "--lr_scheduler.warmup_steps=0", "--lr_scheduler.decay_ratio=0",
                  "--training.steps=30", "--checkpoint.interval=1000"},
                 "stopping before the optimizer step"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ringtrain::testing
