// Ulysses and hybrid Ulysses × ring context parallelism end to end
// (parallelism.context_parallel_method): ringtrain-run over Gloo against the independent PyTorch
// reference (tests/parity/llama_reference.py train), 5 AdamW steps — ulysses at cp 2 and at cp 4
// (with fewer K/V heads than the degree: replicated), hybrid 2 × 2, hybrid with block-causal
// documents, dp 2 × ulysses 2, FSDP shard 2 × ulysses 2; every method against CP = 1 within 1e-6;
// the same config twice bitwise; a resumed run bitwise; a checkpoint saved under one method resumed
// under another within 1e-6; activation checkpointing, accumulation and bf16; the refusals.
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

// The fixture (init.pt, tokens.bin with documents, document_fixture.h: 4 query heads, 2 K/V heads,
// so ulysses 2 splits the K/V heads and ulysses 4 replicates them) and the reference's losses,
// causal and block-causal, made once for all the tests of this file.
class UlyssesParityTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto made = MakeDocumentFixture(dir_->path());
    ASSERT_EQ(made.exit_code, 0) << made.output;
    for (const bool documents : {false, true}) {
      const auto ref = TrainDocumentReference(
          dir_->path(), documents ? "documents.json" : "causal.json", documents);
      ASSERT_EQ(ref.exit_code, 0) << ref.output;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // ringtrain-run on `nproc` ranks into a fresh JSONL; returns its path.
  static std::string Train(const TempDir& dir, const std::string& name, int nproc,
                           std::vector<std::string> extra) {
    extra.push_back("--metrics.jsonl=" + (dir / name));
    std::vector<std::string> args = DocumentTrainerOptions(dir_->path());
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = RunCommand(LauncherCommand(nproc, args));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    last_output_ = r.output;
    return dir / name;
  }

  static std::vector<double> Reference(const std::string& file, const std::string& key) {
    return ReferenceColumn(*dir_ / file, key);
  }

  static TempDir* dir_;
  static std::string last_output_;  // the last Train's output (the trainers' logs)
};

TempDir* UlyssesParityTest::dir_ = nullptr;
std::string UlyssesParityTest::last_output_;

struct Run {
  const char* name;
  int nproc;
  std::vector<std::string> options;
  bool documents = false;
};

std::vector<std::string> Ulysses(int cp) {
  return {"--parallelism.context_parallel_degree=" + std::to_string(cp),
          "--parallelism.context_parallel_method=ulysses"};
}

std::vector<std::string> Hybrid(int ulysses, int ring) {
  return {"--parallelism.context_parallel_degree=" + std::to_string(ulysses * ring),
          "--parallelism.context_parallel_method=hybrid",
          "--parallelism.context_parallel_ulysses_degree=" + std::to_string(ulysses)};
}

std::vector<std::string> Plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<std::string> kDocuments = {"--model.attn_mask_type=block_causal",
                                             "--training.eos_id=" + kDocumentEos};

// Every method and mesh against the reference (the 1e-4) and against CP = 1 (1e-6).
void CheckRuns(const std::vector<Run>& runs) {
  TempDir dir;
  const std::string cp1 = UlyssesParityTest::Train(dir, "cp1.jsonl", 1, {});
  const std::string cp1_documents =
      UlyssesParityTest::Train(dir, "cp1_documents.jsonl", 1, kDocuments);
  for (const Run& run : runs) {
    const std::string file = run.documents ? "documents.json" : "causal.json";
    const std::string path =
        UlyssesParityTest::Train(dir, std::string(run.name) + ".jsonl", run.nproc,
                                 run.documents ? Plus(run.options, kDocuments) : run.options);
    // The method the log names is the one asked for.
    const std::string method = std::string(run.name).find("hybrid") != std::string::npos
                                   ? "ulysses over groups of 2 (cp 4), then ring over 2"
                                   : "ulysses over groups of";
    EXPECT_NE(UlyssesParityTest::last_output_.find(method), std::string::npos)
        << run.name << ": " << UlyssesParityTest::last_output_;
    ExpectWithin(Column(path, "loss"), UlyssesParityTest::Reference(file, "loss"), 1e-4,
                 std::string(run.name) + " vs reference");
    ExpectWithin(Column(path, "grad_norm"), UlyssesParityTest::Reference(file, "grad_norm"), 1e-4,
                 std::string(run.name) + " grad_norm vs reference");
    ExpectWithin(Column(path, "loss"), Column(run.documents ? cp1_documents : cp1, "loss"), 1e-6,
                 std::string(run.name) + " vs cp1");
  }
}

TEST_F(UlyssesParityTest, UlyssesAndHybridMatchThePyTorchReferenceAndCp1) {
  CheckRuns({{"ulysses_cp2", 2, Ulysses(2)},
             // 2 K/V heads over 4 ranks: each rank gets the one its query head uses.
             {"ulysses_cp4_kv_replicated", 4, Ulysses(4)},
             {"hybrid_2x2", 4, Hybrid(2, 2)},
             {"hybrid_2x2_allgather", 4,
              Plus(Hybrid(2, 2), {"--parallelism.context_parallel_rotate_method=allgather",
                                  "--parallelism.context_parallel_load_balancer=none"})}});
}

TEST_F(UlyssesParityTest, DocumentsAndDataParallelMeshesMatchThePyTorchReferenceAndCp1) {
  CheckRuns({{"hybrid_2x2_documents", 4,
              Plus(Hybrid(2, 2), {"--parallelism.context_parallel_load_balancer=document"}),
              /*documents=*/true},
             // The same global batch of 4: two replicas (or FSDP shards) of 2.
             {"dp2_ulysses2", 4,
              Plus(Ulysses(2), {"--parallelism.data_parallel_replicate_degree=2",
                                "--training.local_batch_size=2"})},
             {"fsdp2_ulysses2", 4,
              Plus(Ulysses(2), {"--parallelism.data_parallel_shard_degree=2",
                                "--training.local_batch_size=2"})}});
}

// The same config twice bitwise; a resume from step 3 bitwise; that checkpoint resumed under the
// other methods (the weights and optimizer state do not depend on the method) within 1e-6.
TEST_F(UlyssesParityTest, RepeatsBitwiseResumesBitwiseAndResumesUnderAnotherMethod) {
  TempDir dir;
  auto six_steps = [&](std::vector<std::string> method, const std::string& folder) {
    method.push_back("--training.steps=6");
    if (folder.empty()) return method;
    return Plus(method, {"--checkpoint.enable=true", "--checkpoint.folder=" + (dir / folder),
                         "--checkpoint.interval=3", "--checkpoint.keep_latest_k=0"});
  };
  const std::string a = Train(dir, "a.jsonl", 4, six_steps(Hybrid(2, 2), "ckpt"));
  const std::string b = Train(dir, "b.jsonl", 4, six_steps(Hybrid(2, 2), ""));
  const std::vector<std::string> losses = ReadJsonlColumn(a, "loss");
  ASSERT_EQ(losses.size(), 6u);
  EXPECT_EQ(ReadJsonlColumn(b, "loss"), losses);
  EXPECT_EQ(ReadJsonlColumn(b, "grad_norm"), ReadJsonlColumn(a, "grad_norm"));
  const std::vector<double> tail = {std::stod(losses[3]), std::stod(losses[4]),
                                    std::stod(losses[5])};
  auto resume = [&](const std::string& name, const std::vector<std::string>& method) {
    fs::create_directories(dir / name);
    fs::copy(dir / "ckpt/step-3", dir / (name + "/step-3"), fs::copy_options::recursive);
    return Train(dir, name + ".jsonl", 4, six_steps(method, name));
  };
  EXPECT_EQ(ReadJsonlColumn(resume("hybrid", Hybrid(2, 2)), "loss"),
            std::vector<std::string>(losses.begin() + 3, losses.end()));
  ExpectWithin(Column(resume("as_ulysses", Ulysses(4)), "loss"), tail, 1e-6,
               "hybrid checkpoint resumed as ulysses 4");
  ExpectWithin(Column(resume("as_ring", {"--parallelism.context_parallel_degree=4"}), "loss"), tail,
               1e-6, "hybrid checkpoint resumed as ring 4");
}

// Activation checkpointing (op keeps the attention output and log-sum-exp: the all-to-alls are not
// repeated), gradient accumulation and bf16 under Ulysses: op and full bitwise the plain run,
// two micro-batches of 2 within 1e-6 of the batch of 4, bf16 within bf16's tolerance.
TEST_F(UlyssesParityTest, CheckpointingAccumulationAndBfloat16WorkWithUlysses) {
  TempDir dir;
  const std::vector<std::string> u2 = Ulysses(2);
  const std::string plain = Train(dir, "plain.jsonl", 2, u2);
  const std::string op = Train(dir, "op.jsonl", 2,
                               Plus(u2, {"--activation_checkpoint.mode=selective",
                                         "--activation_checkpoint.selective_ac_option=op"}));
  const std::string full =
      Train(dir, "full.jsonl", 2, Plus(u2, {"--activation_checkpoint.mode=full"}));
  EXPECT_EQ(ReadJsonlColumn(op, "loss"), ReadJsonlColumn(plain, "loss"));
  EXPECT_EQ(ReadJsonlColumn(full, "loss"), ReadJsonlColumn(plain, "loss"));
  const std::string acc =
      Train(dir, "acc.jsonl", 2,
            Plus(u2, {"--training.local_batch_size=2", "--training.global_batch_size=4"}));
  ExpectWithin(Column(acc, "loss"), Column(plain, "loss"), 1e-6, "accumulation vs one batch");
  const std::string bf16 =
      Train(dir, "bf16.jsonl", 2, Plus(u2, {"--training.mixed_precision_param=bfloat16"}));
  ExpectWithin(Column(bf16, "loss"), Reference("causal.json", "loss"), 5e-3,
               "bf16 vs float32 reference");
}

TEST_F(UlyssesParityTest, RefusesHeadsTheDegreeCannotSplitAndImpossibleMeshes) {
  auto run = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {ConfigPath("debug_model.toml"), "--training.steps=1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunCommand(TrainerCommand(args));
  };
  auto expect_refused = [](const CommandResult& r, const std::vector<std::string>& names) {
    EXPECT_NE(r.exit_code, 0) << r.output;
    for (const std::string& name : names) {
      EXPECT_NE(r.output.find(name), std::string::npos) << name << " not in: " << r.output;
    }
  };
  // debug_model: 8 query heads, 4 K/V heads.
  expect_refused(run(Plus(Hybrid(3, 1), {"--parallelism.context_parallel_degree=6"})),
                 {"model.n_heads = 8", "context_parallel_ulysses_degree = 3"});
  expect_refused(run(Plus(Ulysses(6), {"--model.n_heads=24", "--model.dim=192"})),
                 {"model.n_kv_heads = 4", "context_parallel_ulysses_degree = 6"});
  expect_refused(run({"--parallelism.context_parallel_degree=4",
                      "--parallelism.context_parallel_method=hybrid",
                      "--parallelism.context_parallel_ulysses_degree=3"}),
                 {"context_parallel_ulysses_degree = 3", "context_parallel_degree = 4"});
  // A mesh the world cannot hold: cp 4 on one rank.
  expect_refused(run(Ulysses(4)), {"context_parallel_degree", "world size"});
}

}  // namespace
}  // namespace ringtrain::testing
