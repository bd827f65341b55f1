// Tests for OpenDataset: the synthetic Markov source against an independent entropy estimate, and
// the text and bin readers against fixture files written to a temporary folder.
#include "worker/engine/data/dataset.h"
#include "worker/engine/data/synthetic_source.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;

// Whether `status`'s message contains `part`; prints the message when not.
::testing::AssertionResult MessageHas(const absl::Status& status, const std::string& part) {
  if (std::string(status.message()).find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "\"" << status.message() << "\" lacks \"" << part << "\"";
}

// 1.75 bits in nats: the entropy of (1/2, 1/4, 1/8, 1/8).
constexpr double kFourSuccessorEntropy = 1.2130075659799042;

// The shared scratch folder (tests/integration/test_util.h), plus writing files into it.
class TempDir : public testing::TempDir {
 public:
  // Writes `bytes` to `relative` (creating folders) and returns the full path.
  std::string Write(const std::string& relative, const std::string& bytes) const {
    const fs::path p = fs::path(path()) / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
};

// Little-endian bytes of `tokens`, `width` bytes each.
std::string LittleEndian(const std::vector<uint64_t>& tokens, int width) {
  std::string out;
  for (uint64_t t : tokens) {
    for (int b = 0; b < width; ++b) out.push_back(static_cast<char>((t >> (8 * b)) & 0xFF));
  }
  return out;
}

std::vector<int64_t> ReadAll(const TokenDataset& d) {
  std::vector<int64_t> out(static_cast<size_t>(d.num_tokens()));
  d.Read(0, d.num_tokens(), out.data());
  return out;
}

DatasetSpec Synthetic(int64_t vocab, uint64_t seed, int64_t min_tokens = 0) {
  DatasetSpec spec;
  spec.kind = DatasetKind::kSynthetic;
  spec.vocab_size = vocab;
  spec.seed = seed;
  spec.min_tokens = min_tokens;
  return spec;
}

// ---- synthetic ----------------------------------------------------------------------------------

TEST(SyntheticDatasetTest, SizeDescribeAndEntropyRate) {
  auto d = OpenDataset(Synthetic(512, 7));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->num_tokens(), int64_t{1} << 20);
  EXPECT_NEAR((*d)->entropy_rate_nats(), kFourSuccessorEntropy, 1e-12);
  EXPECT_EQ((*d)->Describe(),
            "synthetic Markov source: vocab 512, 4 successors/state, entropy rate 1.2130 "
            "nats/token, 1048576 tokens");

  auto big = OpenDataset(Synthetic(512, 7, 3'000'000));
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ((*big)->num_tokens(), 3'000'000);
}

TEST(SyntheticDatasetTest, SmallVocabRenormalises) {
  // K < 4 keeps the first K weights of (4, 2, 1, 1) and renormalises them.
  const auto entropy = [](std::vector<double> w) {
    double total = 0, h = 0;
    for (double x : w) total += x;
    for (double x : w) h -= x / total * std::log(x / total);
    return h;
  };
  const std::map<int64_t, double> expected = {
      {1, 0.0}, {2, entropy({4, 2})}, {3, entropy({4, 2, 1})}, {4, kFourSuccessorEntropy}};
  for (const auto& [vocab, h] : expected) {
    auto d = OpenDataset(Synthetic(vocab, 3));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_NEAR((*d)->entropy_rate_nats(), h, 1e-12) << "vocab " << vocab;
    for (int64_t t : ReadAll(**d)) ASSERT_LT(t, vocab);
  }
}

TEST(SyntheticDatasetTest, DeterministicPerSeed) {
  auto a = OpenDataset(Synthetic(1000, 42));
  auto b = OpenDataset(Synthetic(1000, 42));
  auto c = OpenDataset(Synthetic(1000, 43));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const std::vector<int64_t> ta = ReadAll(**a), tb = ReadAll(**b), tc = ReadAll(**c);
  EXPECT_EQ(ta, tb);
  int64_t same = 0;
  for (size_t i = 0; i < ta.size(); ++i) same += ta[i] == tc[i];
  // Unrelated streams agree at ~1/V of positions.
  EXPECT_LT(same, static_cast<int64_t>(ta.size() / 100));

  // Read at an offset matches the whole.
  std::vector<int64_t> part(100);
  (*a)->Read(12345, 100, part.data());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), ta.begin() + 12345));
}

TEST(SyntheticDatasetTest, EmpiricalConditionalEntropyMatchesRate) {
  constexpr int64_t kVocab = 512;
  auto d = OpenDataset(Synthetic(kVocab, 11));
  ASSERT_TRUE(d.ok()) << d.status();
  const std::vector<int64_t> tokens = ReadAll(**d);

  // Plug-in estimate of H(X_{t+1} | X_t) from pair counts: independent of how the source works.
  std::vector<std::map<int64_t, int64_t>> next(kVocab);
  std::vector<int64_t> from(kVocab, 0);
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    ASSERT_GE(tokens[i], 0);
    ASSERT_LT(tokens[i], kVocab);
    ++next[tokens[i]][tokens[i + 1]];
    ++from[tokens[i]];
  }
  double h = 0;
  const double pairs = static_cast<double>(tokens.size() - 1);
  for (int64_t s = 0; s < kVocab; ++s) {
    EXPECT_LE(next[s].size(), 4u) << "state " << s;  // at most K distinct successors
    for (const auto& [t, c] : next[s]) h -= c / pairs * std::log(static_cast<double>(c) / from[s]);
  }
  EXPECT_NEAR(h, (*d)->entropy_rate_nats(), 0.02);
  EXPECT_NEAR(h, kFourSuccessorEntropy, 0.02);
}

TEST(SyntheticDatasetTest, FourMillionTokensIsFast) {
  const auto start = std::chrono::steady_clock::now();
  auto d = OpenDataset(Synthetic(128256, 1, 4 << 20));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->num_tokens(), 4 << 20);
  // Generous so that a loaded or sanitised build does not flake; typically ~0.1 s.
  EXPECT_LT(seconds, 5.0);
}

// Pinned outputs: the generator is portable by construction, so these hold on every platform and
// standard library; a change here changes every synthetic run and random sampler order.
TEST(PortableRngTest, MatchesSplitMix64Reference) {
  data_internal::PortableRng rng(0);  // reference values of Vigna's splitmix64.c from seed 0
  EXPECT_EQ(rng.Next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(rng.Next(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(rng.Next(), 0x06C45D188009454FULL);
}

TEST(SyntheticDatasetTest, PinnedTokens) {
  auto d = OpenDataset(Synthetic(1000, 42));
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<int64_t> head(12);
  (*d)->Read(0, 12, head.data());
  EXPECT_EQ(head,
            (std::vector<int64_t>{878, 326, 102, 340, 167, 120, 317, 137, 128, 682, 475, 397}));
}

TEST(SyntheticDatasetTest, RejectsBadVocab) {
  EXPECT_EQ(OpenDataset(Synthetic(0, 1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenDataset(Synthetic(-5, 1)).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- text ---------------------------------------------------------------------------------------

DatasetSpec Text(const std::string& path, int64_t vocab = 256) {
  DatasetSpec spec;
  spec.kind = DatasetKind::kText;
  spec.path = path;
  spec.vocab_size = vocab;
  return spec;
}

TEST(TextDatasetTest, FolderReadInSortedPathOrderSkippingHidden) {
  TempDir dir;
  dir.Write("b.txt", "B");
  dir.Write("a.txt", "A");
  dir.Write("a/c.txt", "C");  // component order: folder "a" sorts before "a.txt"
  dir.Write("a/.swp", "hidden");
  dir.Write(".git/config", "hidden");
  dir.Write("z/y/w.bin", std::string("\xff\x00\x80", 3));
  dir.Write("empty.txt", "");
  auto d = OpenDataset(Text(dir.path()));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(ReadAll(**d), (std::vector<int64_t>{'C', 'A', 'B', 255, 0, 128}));
  EXPECT_EQ((*d)->entropy_rate_nats(), -1.0);
  EXPECT_EQ((*d)->Describe(), "text " + dir.path() + ": 6 tokens (bytes of 5 files)");
}

TEST(TextDatasetTest, SingleFileBytes) {
  TempDir dir;
  const std::string path = dir.Write("one.txt", "h\xc3\xa9!");  // "hé!" in UTF-8
  auto d = OpenDataset(Text(path, 128256));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(ReadAll(**d), (std::vector<int64_t>{'h', 0xc3, 0xa9, '!'}));
  std::vector<int64_t> mid(2);
  (*d)->Read(1, 2, mid.data());
  EXPECT_EQ(mid, (std::vector<int64_t>{0xc3, 0xa9}));
}

TEST(TextDatasetTest, Errors) {
  TempDir dir;
  const std::string file = dir.Write("x.txt", "abc");
  auto small = OpenDataset(Text(file, 255));
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(small.status(), "256"));

  dir.Write("empty/e.txt", "");
  auto empty = OpenDataset(Text(dir.path() + "/empty"));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(empty.status(), dir.path() + "/empty"));

  const std::string missing = dir.path() + "/nope";
  auto gone = OpenDataset(Text(missing));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(gone.status(), missing));
  EXPECT_TRUE(MessageHas(gone.status(), "No such file"));
}

// ---- bin ----------------------------------------------------------------------------------------

DatasetSpec Bin(const std::string& path, int64_t vocab, TokenDtype dtype = TokenDtype::kUint16) {
  DatasetSpec spec;
  spec.kind = DatasetKind::kBin;
  spec.path = path;
  spec.vocab_size = vocab;
  spec.token_dtype = dtype;
  return spec;
}

TEST(BinDatasetTest, Uint16) {
  TempDir dir;
  std::vector<uint64_t> tokens;
  for (uint64_t i = 0; i < 1000; ++i) tokens.push_back(i * 61 % 65536);
  tokens.push_back(65535);
  const std::string path = dir.Write("x.bin", LittleEndian(tokens, 2));
  auto d = OpenDataset(Bin(path, 65536));
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ((*d)->num_tokens(), 1001);
  const std::vector<int64_t> got = ReadAll(**d);
  EXPECT_EQ(std::vector<uint64_t>(got.begin(), got.end()), tokens);
  std::vector<int64_t> mid(3);
  (*d)->Read(10, 3, mid.data());
  EXPECT_EQ(mid, (std::vector<int64_t>{610, 671, 732}));
  EXPECT_EQ((*d)->Describe(), "bin " + path + ": 1001 tokens (uint16)");
}

TEST(BinDatasetTest, Uint32) {
  TempDir dir;
  const std::vector<uint64_t> tokens = {0, 70000, 128255, 1, 0x01020304};
  const std::string path = dir.Write("x.bin", LittleEndian(tokens, 4));
  auto d = OpenDataset(Bin(path, 0x01020305, TokenDtype::kUint32));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(ReadAll(**d), (std::vector<int64_t>{0, 70000, 128255, 1, 0x01020304}));
  EXPECT_EQ((*d)->Describe(), "bin " + path + ": 5 tokens (uint32)");
}

TEST(BinDatasetTest, SizeNotMultipleOfTokenSize) {
  TempDir dir;
  const std::string odd = dir.Write("odd.bin", std::string(5, '\0'));
  auto a = OpenDataset(Bin(odd, 100));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* part : {odd.c_str(), "5 bytes", "uint16"}) {
    EXPECT_TRUE(MessageHas(a.status(), part));
  }
  const std::string six = dir.Write("six.bin", std::string(6, '\0'));
  EXPECT_TRUE(OpenDataset(Bin(six, 100)).ok());
  auto b = OpenDataset(Bin(six, 100, TokenDtype::kUint32));
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(b.status(), "uint32"));
}

TEST(BinDatasetTest, TokenOutsideVocab) {
  TempDir dir;
  const std::string path = dir.Write("x.bin", LittleEndian({1, 2, 3, 700, 5, 900}, 2));
  auto d = OpenDataset(Bin(path, 500));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  // The first bad token: token offset 3 (byte offset 6), the vocab, and a hint — never its value
  // (errors carry no bytes of the file).
  for (const char* part :
       {"token offset 3", "byte offset 6", "vocab_size 500", "HINT", "token_dtype"}) {
    EXPECT_TRUE(MessageHas(d.status(), part));
  }
  EXPECT_TRUE(MessageHas(d.status(), path));
  EXPECT_FALSE(MessageHas(d.status(), "700")) << d.status();
  EXPECT_TRUE(OpenDataset(Bin(path, 901)).ok());
}

TEST(BinDatasetTest, MissingAndEmpty) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing.bin";
  auto gone = OpenDataset(Bin(missing, 100));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(gone.status(), missing));
  EXPECT_TRUE(MessageHas(gone.status(), "No such file"));

  const std::string empty = dir.Write("empty.bin", "");
  EXPECT_EQ(OpenDataset(Bin(empty, 100)).status().code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(OpenDataset(Bin(dir.path(), 100)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OpenDatasetTest, FileKindWithoutPath) {
  DatasetSpec spec;
  spec.kind = DatasetKind::kBin;
  spec.vocab_size = 100;
  auto d = OpenDataset(spec);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(d.status(), "kind \"bin\" needs a path"));
}

}  // namespace
}  // namespace ringtrain
