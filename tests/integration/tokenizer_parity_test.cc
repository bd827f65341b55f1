// The C++ tokenizer against Hugging Face's `tokenizers` (tests/parity/tokenizer_reference.py, on
// the project venv): a byte-level BPE trained by the script on a small text, then the ids of a
// corpus with accents, CJK, emoji, whitespace runs, tabs, CR/LF and digits — from the real
// ringtrain-tokenize, bit for bit, for a Llama 3-style tokenizer.json, a GPT-2-style one and the
// same vocabulary as a tiktoken file. Then the .bin round trip: the `bin` dataset reads back
// exactly those ids, the `text` dataset with the tokenizer gives the same, and the trainer trains
// on it. Decoding: Tokenizer::Decode of those ids, and of random ids that cut characters anywhere,
// gives exactly Hugging Face's decode(ids, skip_special_tokens=False).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "tests/integration/test_util.h"
#include "worker/engine/data/dataset.h"

namespace ringtrain::testing {
namespace {

std::vector<int64_t> ReadLittleEndian(const std::string& path, int width) {
  const std::string bytes = ReadFile(path);
  std::vector<int64_t> ids;
  for (size_t i = 0; i + width <= bytes.size(); i += width) {
    uint64_t v = 0;
    for (int b = width - 1; b >= 0; --b) v = (v << 8) | static_cast<unsigned char>(bytes[i + b]);
    ids.push_back(static_cast<int64_t>(v));
  }
  return ids;
}

// Equal ids, or where they first differ.
::testing::AssertionResult SameIds(const std::vector<int64_t>& ours,
                                   const std::vector<int64_t>& reference) {
  for (size_t i = 0; i < ours.size() && i < reference.size(); ++i) {
    if (ours[i] != reference[i]) {
      return ::testing::AssertionFailure() << "first difference at id " << i << ": ours " << ours[i]
                                           << ", reference " << reference[i];
    }
  }
  if (ours.size() != reference.size()) {
    return ::testing::AssertionFailure() << ours.size() << " ids, reference " << reference.size();
  }
  return ::testing::AssertionSuccess();
}

// Equal bytes, or where they first differ (a whole corpus is too long to print).
::testing::AssertionResult SameText(const std::string& ours, const std::string& reference) {
  if (ours == reference) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < ours.size() && i < reference.size() && ours[i] == reference[i]) ++i;
  return ::testing::AssertionFailure()
         << "first difference at byte " << i << " (ours " << ours.size() << " bytes, reference "
         << reference.size() << "): ours \"" << ours.substr(i, 16) << "\", reference \""
         << reference.substr(i, 16) << "\"";
}

class TokenizerParityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const CommandResult made =
        RunCommand({PythonPath(), Script(), "make-fixture", "--out-dir", dir_->path()});
    ASSERT_EQ(made.exit_code, 0)
        << "the reference needs the venv's tokenizers (scripts/setup.sh installs "
           "tests/parity/requirements.txt):\n"
        << made.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Script() { return SourceDir() + "/tests/parity/tokenizer_reference.py"; }
  static std::string Fixture(const std::string& name) { return *dir_ / name; }

  // Hugging Face's ids of `text` with the tokenizer.json `tokenizer`.
  static std::vector<int64_t> Reference(const std::string& tokenizer, const std::string& text,
                                        bool special_as_text = false) {
    const std::string out = *dir_ / ("reference-" + std::to_string(counter_++) + ".bin");
    std::vector<std::string> argv = {
        PythonPath(),  Script(), "encode", "--tokenizer", Fixture(tokenizer), "--text",
        Fixture(text), "--out",  out};
    if (special_as_text) argv.push_back("--special-as-text");
    const CommandResult ran = RunCommand(argv);
    EXPECT_EQ(ran.exit_code, 0) << ran.output;
    return ReadLittleEndian(out, 4);
  }

  // ringtrain-tokenize's ids of `text` (uint32 output).
  static std::vector<int64_t> Ours(const std::string& tokenizer, const std::string& text) {
    const std::string out = *dir_ / ("ours-" + std::to_string(counter_++) + ".bin");
    const CommandResult ran =
        RunCommand({BinDir() + "/ringtrain-tokenize", Fixture(text), "--tokenizer",
                    Fixture(tokenizer), "--out", out, "--dtype", "uint32"});
    EXPECT_EQ(ran.exit_code, 0) << ran.output;
    return ReadLittleEndian(out, 4);
  }

  // Hugging Face's decode(ids, skip_special_tokens=False) with the tokenizer.json `tokenizer`.
  static std::string ReferenceText(const std::string& tokenizer, const std::vector<int64_t>& ids) {
    const std::string in = *dir_ / ("ids-" + std::to_string(counter_++) + ".bin");
    const std::string out = *dir_ / ("text-" + std::to_string(counter_++) + ".txt");
    std::string bytes;
    for (int64_t id : ids) {
      for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>((id >> (8 * b)) & 0xFF));
    }
    WriteFile(in, bytes);
    const CommandResult ran = RunCommand({PythonPath(), Script(), "decode", "--tokenizer",
                                          Fixture(tokenizer), "--ids", in, "--out", out});
    EXPECT_EQ(ran.exit_code, 0) << ran.output;
    return ReadFile(out);
  }

  static std::unique_ptr<Tokenizer> LoadOurs(const std::string& tokenizer) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = Tokenizer::Load(Fixture(tokenizer));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? *std::move(loaded) : nullptr;
  }

  // Tokenizer::Decode's text of `ids`, or its error as text.
  static std::string OursText(const std::string& tokenizer, const std::vector<int64_t>& ids) {
    const std::unique_ptr<Tokenizer> ours = LoadOurs(tokenizer);
    if (ours == nullptr) return "<no tokenizer>";
    const absl::StatusOr<std::string> text =
        ours->Decode(std::vector<int32_t>(ids.begin(), ids.end()));
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : text.status().ToString();
  }

  // `count` ids drawn uniformly from the tokenizer's, leaving out `excluded`.
  static std::vector<int64_t> RandomIds(const std::string& tokenizer, int count, uint32_t seed,
                                        int64_t excluded = -1) {
    const std::unique_ptr<Tokenizer> ours = LoadOurs(tokenizer);
    if (ours == nullptr) return {};
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int64_t> pick(0, ours->vocab_size() - 1);
    std::vector<int64_t> ids;
    while (static_cast<int>(ids.size()) < count) {
      const int64_t id = pick(rng);
      if (id != excluded) ids.push_back(id);
    }
    return ids;
  }

  static TempDir* dir_;
  static int counter_;
};

TempDir* TokenizerParityTest::dir_ = nullptr;
int TokenizerParityTest::counter_ = 0;

TEST_F(TokenizerParityTest, Llama3StyleJsonMatchesHuggingFace) {
  for (const char* text : {"corpus.txt", "train.txt"}) {
    const std::vector<int64_t> reference = Reference("llama3.json", text);
    ASSERT_GT(reference.size(), 100u);
    EXPECT_TRUE(SameIds(Ours("llama3.json", text), reference)) << text;
  }
}

TEST_F(TokenizerParityTest, Gpt2StyleJsonMatchesHuggingFace) {
  for (const char* text : {"corpus.txt", "train.txt"}) {
    EXPECT_TRUE(SameIds(Ours("gpt2.json", text), Reference("gpt2.json", text))) << text;
  }
}

// The same vocabulary as tiktoken lines: ranks instead of merges, Llama 3's pattern, and no
// special tokens (so the reference encodes "<|endoftext|>" as text too).
TEST_F(TokenizerParityTest, TiktokenFileMatchesHuggingFace) {
  for (const char* text : {"corpus.txt", "train.txt"}) {
    EXPECT_TRUE(SameIds(Ours("llama3.tiktoken", text),
                        Reference("llama3.json", text, /*special_as_text=*/true)))
        << text;
  }
}

// Byte-level BPE loses nothing: Hugging Face decodes the corpus's ids to the corpus itself, and
// so do we.
TEST_F(TokenizerParityTest, DecodeMatchesHuggingFace) {
  for (const char* tokenizer : {"llama3.json", "gpt2.json"}) {
    for (const char* text : {"corpus.txt", "train.txt"}) {
      const std::vector<int64_t> ids = Reference(tokenizer, text);
      const std::string reference = ReferenceText(tokenizer, ids);
      EXPECT_TRUE(SameText(reference, ReadFile(Fixture(text)))) << tokenizer << " " << text;
      EXPECT_TRUE(SameText(OursText(tokenizer, ids), reference)) << tokenizer << " " << text;
    }
  }
}

// Ids no text would give: drawn at random, so tokens cut characters anywhere and the special token
// sits mid-word; both must replace the same bytes with U+FFFD (one per maximal invalid run).
TEST_F(TokenizerParityTest, DecodeOfRandomIdsMatchesHuggingFace) {
  for (const char* tokenizer : {"llama3.json", "gpt2.json"}) {
    const std::vector<int64_t> ids = RandomIds(tokenizer, 4000, 29);
    const std::string reference = ReferenceText(tokenizer, ids);
    EXPECT_NE(reference.find("\xEF\xBF\xBD"), std::string::npos) << "no U+FFFD to compare";
    EXPECT_NE(reference.find("<|endoftext|>"), std::string::npos) << "no special token";
    EXPECT_TRUE(SameText(OursText(tokenizer, ids), reference)) << tokenizer;
  }
}

// The tiktoken file decodes its ids to the bytes Hugging Face decodes the same vocabulary's to. It
// has no special token: that id is refused, naming it (Hugging Face would skip an unknown id).
TEST_F(TokenizerParityTest, TiktokenDecodeMatchesHuggingFace) {
  const std::vector<int64_t> corpus =
      Reference("llama3.json", "corpus.txt", /*special_as_text=*/true);
  EXPECT_TRUE(SameText(OursText("llama3.tiktoken", corpus), ReadFile(Fixture("corpus.txt"))));

  const std::unique_ptr<Tokenizer> json = LoadOurs("llama3.json");
  ASSERT_NE(json, nullptr);
  std::vector<int32_t> special;
  json->Encode("<|endoftext|>", &special);
  ASSERT_EQ(special.size(), 1u);
  const std::vector<int64_t> ids = RandomIds("llama3.json", 4000, 31, special[0]);
  EXPECT_TRUE(SameText(OursText("llama3.tiktoken", ids), ReferenceText("llama3.json", ids)));

  const std::unique_ptr<Tokenizer> tiktoken = LoadOurs("llama3.tiktoken");
  ASSERT_NE(tiktoken, nullptr);
  const absl::StatusOr<std::string> refused = tiktoken->Decode({'a', special[0]});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(refused.status().message())
                .find("ids[1] = " + std::to_string(special[0]) + " is not a token id"),
            std::string::npos)
      << refused.status();
}

TEST_F(TokenizerParityTest, BinRoundTripAndTextDataset) {
  const std::vector<int64_t> reference = Reference("llama3.json", "train.txt");
  const std::string bin = *dir_ / "train.bin";
  const CommandResult ran = RunCommand({BinDir() + "/ringtrain-tokenize", Fixture("train.txt"),
                                        "--tokenizer", Fixture("llama3.json"), "--out", bin});
  ASSERT_EQ(ran.exit_code, 0) << ran.output;
  // 800 ids fit uint16, which auto picks; the summary says how to train on it.
  EXPECT_NE(ran.output.find(" tokens (uint16)"), std::string::npos) << ran.output;
  EXPECT_NE(ran.output.find("tokens/s"), std::string::npos) << ran.output;
  EXPECT_NE(ran.output.find("training.token_dtype = \"uint16\""), std::string::npos) << ran.output;
  // ... and how a cluster's workers see it: under their data root, by a relative path.
  EXPECT_NE(ran.output.find("`ringctl up --data-root DIR`) and give training.dataset_path "
                            "relative to DIR, e.g. \"train.bin\""),
            std::string::npos)
      << ran.output;

  DatasetSpec spec;
  spec.kind = DatasetKind::kBin;
  spec.path = bin;
  spec.vocab_size = 800;
  absl::StatusOr<std::unique_ptr<TokenDataset>> data = OpenDataset(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<int64_t> read((*data)->num_tokens());
  (*data)->Read(0, (*data)->num_tokens(), read.data());
  EXPECT_TRUE(SameIds(read, reference));

  spec.kind = DatasetKind::kText;
  spec.path = Fixture("train.txt");
  spec.tokenizer_path = Fixture("llama3.json");
  data = OpenDataset(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  read.assign((*data)->num_tokens(), -1);
  (*data)->Read(0, (*data)->num_tokens(), read.data());
  // One document per file: the ids, then the tokenizer's end-of-text token (<|endoftext|>).
  const absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Load(Fixture("llama3.json"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const int64_t eos = (*tokenizer)->end_of_text_id();
  ASSERT_GE(eos, 0);
  std::vector<int64_t> with_eos = reference;
  with_eos.push_back(eos);
  EXPECT_TRUE(SameIds(read, with_eos));
  EXPECT_EQ((*data)->eos_id(), eos);
  EXPECT_NE((*data)->Describe().find("tokenizer.json: byte-level BPE, 800 ids"), std::string::npos)
      << (*data)->Describe();
  // training.eos_id chooses another separator.
  spec.eos_id = 7;
  data = OpenDataset(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ((*data)->eos_id(), 7);
  int64_t last = -1;
  (*data)->Read((*data)->num_tokens() - 1, 1, &last);
  EXPECT_EQ(last, 7);
  spec.eos_id = -1;

  spec.vocab_size = 512;
  data = OpenDataset(spec);
  ASSERT_FALSE(data.ok());
  EXPECT_NE(std::string(data.status().message())
                .find("model.vocab_size = 512 is smaller than "
                      "the 800 ids of the tokenizer"),
            std::string::npos)
      << data.status();
}

TEST_F(TokenizerParityTest, EosSeparatorAndErrors) {
  const std::vector<int64_t> corpus = Reference("llama3.json", "corpus.txt");
  const std::vector<int64_t> train = Reference("llama3.json", "train.txt");
  const std::string out = *dir_ / "two.bin";
  CommandResult ran =
      RunCommand({BinDir() + "/ringtrain-tokenize", Fixture("corpus.txt"), Fixture("train.txt"),
                  "--tokenizer", Fixture("llama3.json"), "--out", out, "--eos-id", "0"});
  ASSERT_EQ(ran.exit_code, 0) << ran.output;
  std::vector<int64_t> expected = corpus;
  expected.push_back(0);
  expected.insert(expected.end(), train.begin(), train.end());
  expected.push_back(0);
  EXPECT_TRUE(SameIds(ReadLittleEndian(out, 2), expected));

  ran = RunCommand({BinDir() + "/ringtrain-tokenize", Fixture("corpus.txt"), "--tokenizer",
                    *dir_ / "absent.json", "--out", *dir_ / "never.bin"});
  EXPECT_EQ(ran.exit_code, 1);
  EXPECT_NE(ran.output.find("absent.json"), std::string::npos) << ran.output;
  ran = RunCommand({BinDir() + "/ringtrain-tokenize", Fixture("corpus.txt"), "--tokenizer",
                    Fixture("llama3.json"), "--out", *dir_ / "never.bin", "--eos-id", "800"});
  EXPECT_EQ(ran.exit_code, 1);
  EXPECT_NE(ran.output.find("--eos-id 800 is not below the tokenizer's 800 ids"), std::string::npos)
      << ran.output;
  ran = RunCommand({BinDir() + "/ringtrain-tokenize", dir_->path(), "--tokenizer",
                    Fixture("llama3.json"), "--out", *dir_ / "never.bin"});
  EXPECT_EQ(ran.exit_code, 1);
  EXPECT_NE(ran.output.find("but a folder"), std::string::npos) << ran.output;
  EXPECT_NE(RunCommand({"/bin/ls", *dir_ / "never.bin"}).exit_code, 0)
      << "a failed run left a file";
  EXPECT_EQ(RunCommand({BinDir() + "/ringtrain-tokenize", "--out", "x"}).exit_code, 2);
}

// training.dataset = "text" with training.tokenizer_path: the trainer tokenizes (an EOS after each
// file) and trains, causal and block-causal, and refuses a model whose vocabulary is smaller than
// the tokenizer's, naming both.
TEST_F(TokenizerParityTest, TrainerTrainsOnTokenizedText) {
  const std::vector<std::string> base = {BinDir() + "/ringtrain-trainer",
                                         ConfigPath("debug_model.toml"),
                                         "--training.steps=2",
                                         "--training.dataset=text",
                                         "--training.dataset_path=" + Fixture("train.txt"),
                                         "--training.tokenizer_path=" + Fixture("llama3.json"),
                                         "--training.seq_len=64",
                                         "--training.local_batch_size=2",
                                         "--model.max_seq_len=64",
                                         "--lr_scheduler.warmup_steps=0"};
  std::vector<std::string> argv = base;
  argv.push_back("--model.vocab_size=800");
  CommandResult ran = RunCommand(argv);
  ASSERT_EQ(ran.exit_code, 0) << ran.output;
  EXPECT_NE(ran.output.find("tokenizer.json: byte-level BPE, 800 ids"), std::string::npos)
      << ran.output;
  // One document per file: the tokenizer's end-of-text token (<|endoftext|>, id 0) after each,
  // which block-causal attention takes as its EOS when training.eos_id is not set.
  EXPECT_NE(ran.output.find("EOS 0 after each"), std::string::npos) << ran.output;
  argv = base;
  argv.push_back("--model.vocab_size=800");
  argv.push_back("--model.attn_mask_type=block_causal");
  argv.push_back("--parallelism.context_parallel_degree=1");
  ran = RunCommand(argv);
  EXPECT_EQ(ran.exit_code, 0) << ran.output;

  argv = base;
  argv.push_back("--model.vocab_size=512");
  ran = RunCommand(argv);
  EXPECT_NE(ran.exit_code, 0);
  EXPECT_NE(ran.output.find("model.vocab_size = 512 is smaller than the 800 ids"),
            std::string::npos)
      << ran.output;
}

}  // namespace
}  // namespace ringtrain::testing
