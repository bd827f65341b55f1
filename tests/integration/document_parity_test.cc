// Packed documents end to end (model.attn_mask_type = "block_causal"): ringtrain-run over Gloo
// against the independent PyTorch reference with a per-row document mask (tests/parity/
// llama_reference.py train --eos-id), 5 AdamW steps, for documents of 1 token, documents longer
// than a CP chunk and than the window, and windows that start mid-document — at cp 1, 2, 3 and 4,
// with the headtail, none and document balancers, alltoall and allgather, and FSDP; every CP run
// against CP = 1 within 1e-6; the same config twice bitwise; a resumed run bitwise; the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integration/document_fixture.h"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

namespace fs = std::filesystem;

// The fixture (init.pt, tokens.bin of documents, document_fixture.h) and the reference's losses,
// made once for all the tests of this file.
class DocumentParityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto made = MakeDocumentFixture(dir_->path());
    ASSERT_EQ(made.exit_code, 0) << made.output;
    const auto ref = TrainDocumentReference(dir_->path(), "reference.json", /*documents=*/true);
    ASSERT_EQ(ref.exit_code, 0) << ref.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // The trainer's options for the fixture's model, data and optimizer, block-causal.
  static std::vector<std::string> Options(const std::vector<std::string>& extra) {
    std::vector<std::string> args = DocumentTrainerOptions(dir_->path());
    args.insert(args.end(),
                {"--model.attn_mask_type=block_causal", "--training.eos_id=" + kDocumentEos});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // ringtrain-run on `nproc` ranks into a fresh JSONL; returns its path.
  static std::string Train(const TempDir& dir, const std::string& name, int nproc,
                           std::vector<std::string> extra) {
    extra.push_back("--metrics.jsonl=" + (dir / name));
    const auto r = RunCommand(LauncherCommand(nproc, Options(extra)));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return dir / name;
  }

  static std::vector<double> Reference(const std::string& key) {
    return ReferenceColumn(*dir_ / "reference.json", key);
  }

  static TempDir* dir_;
};

TempDir* DocumentParityTest::dir_ = nullptr;

struct Mesh {
  const char* name;
  int nproc;
  std::vector<std::string> options;
};

// Every mesh against the reference and against CP = 1 (1e-6). The issue asks 1e-4 of the
// reference; the bound is 1e-5 (measured: at most 4.8e-7), because plain causal attention on
// these documents is only ~1e-4 from the reference at step 1 (the model is small and fresh): the
// causal run must be farther than the bound, or the comparison would not show the mask.
TEST_F(DocumentParityTest, EveryMeshMatchesThePyTorchReferenceAndCp1) {
  TempDir dir;
  constexpr double kTol = 1e-5;
  const std::vector<double> ref_loss = Reference("loss"), ref_norm = Reference("grad_norm");
  ASSERT_EQ(ref_loss.size(), size_t(kDocumentSteps));
  const std::string causal = Train(dir, "causal.jsonl", 1, {"--model.attn_mask_type=causal"});
  const double causal_diff = MaxDiff(Column(causal, "loss"), ref_loss);
  std::printf("plain causal vs the block-causal reference: max |diff| %.3e\n", causal_diff);
  EXPECT_GT(causal_diff, 100 * kTol);
  const std::string cp1 = Train(dir, "cp1.jsonl", 1, {});
  ExpectWithin(Column(cp1, "loss"), ref_loss, kTol, "cp1 loss vs reference");
  ExpectWithin(Column(cp1, "grad_norm"), ref_norm, kTol, "cp1 grad_norm vs reference");
  const std::vector<Mesh> meshes = {
      {"cp2_headtail_alltoall", 2, {"--parallelism.context_parallel_degree=2"}},
      {"cp3_none_allgather",
       3,
       {"--parallelism.context_parallel_degree=3",
        "--parallelism.context_parallel_load_balancer=none",
        "--parallelism.context_parallel_rotate_method=allgather"}},
      {"cp3_document_alltoall",
       3,
       {"--parallelism.context_parallel_degree=3",
        "--parallelism.context_parallel_load_balancer=document"}},
      {"cp4_document_allgather",
       4,
       {"--parallelism.context_parallel_degree=4",
        "--parallelism.context_parallel_load_balancer=document",
        "--parallelism.context_parallel_rotate_method=allgather"}},
      // The same global batch of 4 over two FSDP replicas' shards.
      {"fsdp2_cp2_document",
       4,
       {"--parallelism.context_parallel_degree=2", "--parallelism.data_parallel_shard_degree=2",
        "--parallelism.context_parallel_load_balancer=document", "--training.local_batch_size=2"}},
  };
  for (const Mesh& m : meshes) {
    const std::string path = Train(dir, std::string(m.name) + ".jsonl", m.nproc, m.options);
    ExpectWithin(Column(path, "loss"), ref_loss, kTol, std::string(m.name) + " vs reference");
    ExpectWithin(Column(path, "grad_norm"), ref_norm, kTol,
                 std::string(m.name) + " grad_norm vs reference");
    ExpectWithin(Column(path, "loss"), Column(cp1, "loss"), 1e-6, std::string(m.name) + " vs cp1");
  }
  // The document balancer's plan is reported per step, no worse than head-tail's.
  const auto doc = ReadJsonl(dir / "cp4_document_allgather.jsonl");
  ASSERT_EQ(doc.size(), size_t(kDocumentSteps));
  for (const auto& step : doc) {
    ASSERT_TRUE(step.count("attention_imbalance")) << "no attention_imbalance in the JSONL";
    EXPECT_GE(std::stod(step.at("attention_imbalance")), 1.0);
  }
}

TEST_F(DocumentParityTest, SameConfigTwiceIsBitwiseEqualAndAResumeRepeatsTheRun) {
  TempDir dir;
  const std::vector<std::string> cp4 = {"--parallelism.context_parallel_degree=4",
                                        "--parallelism.context_parallel_load_balancer=document",
                                        "--training.steps=6"};
  auto with_checkpoints = [&](const std::string& folder) {
    std::vector<std::string> args = cp4;
    for (const std::string& a :
         {std::string("--checkpoint.enable=true"), "--checkpoint.folder=" + (dir / folder),
          std::string("--checkpoint.interval=3"), std::string("--checkpoint.keep_latest_k=0")}) {
      args.push_back(a);
    }
    return args;
  };
  const std::string a = Train(dir, "a.jsonl", 4, with_checkpoints("ckpt"));
  const std::string b = Train(dir, "b.jsonl", 4, cp4);
  const std::vector<std::string> losses = ReadJsonlColumn(a, "loss");
  ASSERT_EQ(losses.size(), 6u);
  EXPECT_EQ(ReadJsonlColumn(b, "loss"), losses);
  EXPECT_EQ(ReadJsonlColumn(b, "grad_norm"), ReadJsonlColumn(a, "grad_norm"));
  // Resume from step 3 (only that checkpoint in a fresh folder): steps 4–6 bitwise.
  fs::create_directories(dir / "resume");
  fs::copy(dir / "ckpt/step-3", dir / "resume/step-3", fs::copy_options::recursive);
  const std::string resumed = Train(dir, "resumed.jsonl", 4, with_checkpoints("resume"));
  EXPECT_EQ(ReadJsonlColumn(resumed, "loss"),
            std::vector<std::string>(losses.begin() + 3, losses.end()));
}

// Activation checkpointing (op mode keeps attention's output and log-sum-exp), gradient
// accumulation and bf16 with documents: op and full are bitwise the plain run, accumulation of
// two micro-batches of 2 matches the batch of 4 within 1e-6, bf16 stays within bf16's tolerance.
TEST_F(DocumentParityTest, CheckpointingAccumulationAndBfloat16WorkWithDocuments) {
  TempDir dir;
  const std::vector<std::string> cp2 = {"--parallelism.context_parallel_degree=2",
                                        "--parallelism.context_parallel_load_balancer=document"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), cp2.begin(), cp2.end());
    return extra;
  };
  const std::string plain = Train(dir, "plain.jsonl", 2, cp2);
  const std::string op = Train(dir, "op.jsonl", 2,
                               with({"--activation_checkpoint.mode=selective",
                                     "--activation_checkpoint.selective_ac_option=op"}));
  const std::string full = Train(dir, "full.jsonl", 2, with({"--activation_checkpoint.mode=full"}));
  EXPECT_EQ(ReadJsonlColumn(op, "loss"), ReadJsonlColumn(plain, "loss"));
  EXPECT_EQ(ReadJsonlColumn(full, "loss"), ReadJsonlColumn(plain, "loss"));
  const std::string acc =
      Train(dir, "acc.jsonl", 2,
            with({"--training.local_batch_size=2", "--training.global_batch_size=4"}));
  ExpectWithin(Column(acc, "loss"), Column(plain, "loss"), 1e-6, "accumulation vs one batch");
  const std::string bf16 =
      Train(dir, "bf16.jsonl", 2, with({"--training.mixed_precision_param=bfloat16"}));
  // Measured 4.6e-4 (loss ≈ 4.6; bf16's relative step 2^-8); the bound ~10× that.
  ExpectWithin(Column(bf16, "loss"), Reference("loss"), 5e-3, "bf16 vs float32 reference");
}

TEST_F(DocumentParityTest, RefusesBlockCausalWithoutAnEosAndAnEosOutsideTheVocabulary) {
  auto run = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {ConfigPath("debug_model.toml"), "--training.steps=1",
                                     "--model.attn_mask_type=block_causal"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunCommand(TrainerCommand(args));
  };
  const auto no_eos = run({});
  EXPECT_NE(no_eos.exit_code, 0);
  EXPECT_NE(no_eos.output.find("training.eos_id"), std::string::npos) << no_eos.output;
  EXPECT_NE(no_eos.output.find("training.tokenizer_path"), std::string::npos) << no_eos.output;
  const auto outside = run({"--training.eos_id=512"});
  EXPECT_NE(outside.exit_code, 0);
  EXPECT_NE(outside.output.find("training.eos_id"), std::string::npos) << outside.output;
  const auto odd =
      run({"--training.eos_id=0", "--parallelism.context_parallel_degree=3",
           "--parallelism.context_parallel_load_balancer=document", "--training.seq_len=100"});
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.output.find("seq_len"), std::string::npos) << odd.output;
}

}  // namespace
}  // namespace ringtrain::testing
