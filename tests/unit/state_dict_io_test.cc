// state_dict_io against the reference implementation, PyTorch 2.x in the project's .venv:
// fixtures are written by torch.save at test time, and what we write must torch.load back exactly.
// Tensors are compared as exact bytes, through a manifest line per entry:
//   name \t dtype \t comma-separated shape \t hex of the contiguous bytes
#include "worker/engine/serialize/state_dict_io.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/serialize.h>

#include "tests/integration/test_util.h"
#include "worker/engine/serialize/pickle_reader.h"

namespace ringtrain {
namespace {

namespace fs = std::filesystem;
using serialize_internal::StorageRecord;
using serialize_internal::UnpickleStateDict;

constexpr char kPythonManifest[] = R"PY(
import collections, os, sys, zipfile
import torch

def manifest_lines(sd):
    lines = []
    for k, v in sd.items():
        flat = v.detach().contiguous().reshape(-1).view(torch.uint8)
        lines.append('%s\t%s\t%s\t%s' % (k, str(v.dtype)[len('torch.'):],
                                         ','.join(str(s) for s in v.shape),
                                         flat.numpy().tobytes().hex()))
    return lines
)PY";

// Writes every fixture the read tests use into argv[1].
constexpr char kPythonFixtures[] = R"PY(
os.chdir(sys.argv[1])
torch.manual_seed(0)

def fixture(name, sd, **kwargs):
    torch.save(sd, name + '.pt', **kwargs)
    with open(name + '.txt', 'w', encoding='utf-8') as f:
        f.write(''.join(line + '\n' for line in manifest_lines(sd)))

model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
assert type(model.state_dict()) is collections.OrderedDict
fixture('ordered', model.state_dict())
fixture('proto4', model.state_dict(), pickle_protocol=4)
fixture('dtypes', {
    'bf16': torch.randn(3, 5).bfloat16(), 'f16': torch.randn(7).half(),
    'f64': torch.randn(2, 2).double(), 'i64': torch.arange(-5, 5) * (2**40),
    'i32': torch.arange(4, dtype=torch.int32), 'i16': torch.arange(3, dtype=torch.int16),
    'i8': torch.tensor([-3, 4], dtype=torch.int8), 'u8': torch.arange(3, dtype=torch.uint8),
    'bool': torch.tensor([True, False, True]), 'big': torch.randn(70000),  # BININT numel
})
w = torch.randn(4, 6)
views = {'rows': w[1:3], 'tail_of_t': w.t()[2:], 'odd_cols': w[:, 1::2], 'whole': w,
         'one': w[2, 3]}
assert len({v.storage().data_ptr() for v in views.values()}) == 1  # one storage record in the file
fixture('views', views)
fixture('params', {'p': torch.nn.Parameter(torch.randn(3, 2)),
                   'frozen': torch.nn.Parameter(torch.randn(2), requires_grad=False)})
fixture('edge', {'scalar': torch.tensor(2.5), 'empty': torch.empty(0, 3),
                 'empty_long': torch.zeros(0, dtype=torch.int64)})
torch.save([torch.ones(2)], 'list.pt')
torch.save({'weight': torch.ones(2), 'step': 3}, 'int_value.pt')
torch.save({1: torch.ones(2)}, 'int_key.pt')
torch.save({'counts': collections.Counter()}, 'unknown_global.pt')
torch.save({'a': torch.ones(2)}, 'legacy.pt', _use_new_zipfile_serialization=False)
# A storage record shorter than its tensor, with valid CRCs: only the size check can catch it.
with zipfile.ZipFile('views.pt') as src, zipfile.ZipFile('short_record.pt', 'w') as dst:
    for info in src.infolist():
        data = src.read(info)
        short = info.filename.endswith('/data/0')
        dst.writestr(info.filename, data[:len(data) // 2] if short else data)
for name in ('ordered', 'proto4'):
    with zipfile.ZipFile(name + '.pt') as z, open(name + '.pkl', 'wb') as f:
        f.write(z.read([n for n in z.namelist() if n.endswith('/data.pkl')][0]))
)PY";

// Loads argv[1] and compares it with the manifest in argv[2]; exits non-zero on any difference.
constexpr char kPythonCheck[] = R"PY(
# weights_only=True (PyTorch 2.x's safe loader, its default since 2.6): what we write must need
# no code to unpickle.
sd = torch.load(sys.argv[1], weights_only=True)
assert type(sd) is dict, 'torch.load returned %s, not a dict' % type(sd)
got = manifest_lines(sd)
with open(sys.argv[2], encoding='utf-8') as f:
    want = f.read().splitlines()
if got != want:
    for g, w in zip(got + [''] * len(want), want + [''] * len(got)):
        if g != w: print('python read:', g[:200], '\nC++ wrote:  ', w[:200])
    sys.exit(1)
print('ok', len(got))
)PY";

struct PythonRun {
  int exit_code = -1;
  std::string output;
};

PythonRun RunPython(const std::string& dir, const std::string& body, const std::string& args) {
  static int counter = 0;
  const std::string script = dir + "/snippet_" + std::to_string(counter++) + ".py";
  std::ofstream(script) << kPythonManifest << body;
  PythonRun run;
  const std::string command =
      std::string(RINGTRAIN_DEFAULT_PYTHON) + " " + script + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) run.output.append(buf, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// Empty when the reference is usable. These tests exist to compare against it, so its absence is
// a failure, not a skip.
const std::string& PythonTorchProblem() {
  static const std::string problem = [] {
    const std::string python = RINGTRAIN_DEFAULT_PYTHON;
    if (std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0)
      return std::string();
    return python +
           " cannot `import torch`; these tests compare against the PyTorch whose "
           "LibTorch the build links. HINT: run scripts/setup.sh (it installs it into .venv)";
  }();
  return problem;
}

std::string DtypeName(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

std::vector<std::string> ManifestLines(const StateDict& dict) {
  std::vector<std::string> lines;
  for (const auto& [name, tensor] : dict) {
    std::ostringstream line;
    line << name << '\t' << DtypeName(tensor.scalar_type()) << '\t';
    for (int64_t d = 0; d < tensor.dim(); ++d) line << (d ? "," : "") << tensor.size(d);
    line << '\t';
    const at::Tensor flat = tensor.contiguous();
    const auto* bytes = static_cast<const uint8_t*>(flat.data_ptr());
    static const char kHex[] = "0123456789abcdef";
    for (size_t i = 0; i < flat.nbytes(); ++i) line << kHex[bytes[i] >> 4] << kHex[bytes[i] & 15];
    lines.push_back(line.str());
  }
  return lines;
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, absl::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

class StateDictIoTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new testing::TempDir();
    dir_ = new std::string(scratch_->path());
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete scratch_;
  }
  void SetUp() override { ASSERT_TRUE(PythonTorchProblem().empty()) << PythonTorchProblem(); }

  // The torch.save fixtures, written once for the whole suite.
  static const PythonRun& Fixtures() {
    static const PythonRun run = RunPython(*dir_, kPythonFixtures, *dir_);
    return run;
  }
  static std::string Path(const std::string& name) { return *dir_ + "/" + name; }

  // Reads fixture `name`.pt and checks it equals `name`.txt, Python's own account of it.
  void ExpectMatchesPython(const std::string& name) {
    ASSERT_EQ(Fixtures().exit_code, 0) << Fixtures().output;
    absl::StatusOr<StateDict> dict = ReadStateDict(Path(name + ".pt"));
    ASSERT_TRUE(dict.ok()) << dict.status();
    EXPECT_EQ(ManifestLines(*dict), ReadLines(Path(name + ".txt")));
    for (const auto& [key, tensor] : *dict) {
      EXPECT_TRUE(tensor.is_contiguous()) << key;
      EXPECT_TRUE(tensor.device().is_cpu()) << key;
      EXPECT_FALSE(tensor.requires_grad()) << key;
      // Owns exactly its own bytes, so writing to one entry cannot show through another.
      EXPECT_EQ(tensor.storage_offset(), 0) << key;
      EXPECT_EQ(tensor.storage().nbytes(), tensor.nbytes()) << key;
      for (const auto& [other_key, other] : *dict) {
        if (other_key != key && tensor.nbytes() > 0) {
          EXPECT_NE(tensor.data_ptr(), other.data_ptr()) << key << " aliases " << other_key;
        }
      }
    }
  }

  static testing::TempDir* scratch_;  // the suite's scratch folder
  static std::string* dir_;           // its path
};

testing::TempDir* StateDictIoTest::scratch_ = nullptr;
std::string* StateDictIoTest::dir_ = nullptr;

TEST_F(StateDictIoTest, ReadsModelStateDictOrderedDict) { ExpectMatchesPython("ordered"); }
TEST_F(StateDictIoTest, ReadsPickleProtocol4) { ExpectMatchesPython("proto4"); }
TEST_F(StateDictIoTest, ReadsEveryDtype) { ExpectMatchesPython("dtypes"); }
TEST_F(StateDictIoTest, ReadsViewsSharingOneStorage) { ExpectMatchesPython("views"); }
TEST_F(StateDictIoTest, ReadsParameters) { ExpectMatchesPython("params"); }
TEST_F(StateDictIoTest, ReadsScalarAndEmptyTensors) { ExpectMatchesPython("edge"); }

// Names in no sorted order, every dtype, views and a tied pair: Python must see the same.
StateDict SampleDict() {
  at::Tensor base = at::arange(24, at::kFloat).reshape({4, 6}) / 7;
  at::Tensor tied = at::randn({3});
  return {
      {"z.last_first", at::randn({2, 3})},
      {"blocks.0.attn.wq", base.t()},   // non-contiguous
      {"slice", base.narrow(0, 1, 2)},  // offset into a bigger storage
      {"bf16", at::randn({5}).to(at::kBFloat16)},
      {"f16", at::randn({2, 2}).to(at::kHalf)},
      {"f64", at::randn({3}, at::kDouble)},
      {"i64", at::arange(-3, 3, at::kLong) * (int64_t{1} << 40)},
      {"i32", at::arange(4, at::kInt)},
      {"mask", at::rand({6}) > 0.5},
      {"u8", at::arange(5, at::kByte)},
      {"scalar", at::scalar_tensor(3.5)},
      {"empty", at::empty({0, 4})},
      {"tied_a", tied},
      {"tied_b", tied},
      {"n\xc3\xa4me", at::ones({1}).requires_grad_()},
  };
}

TEST_F(StateDictIoTest, PythonReadsWhatWeWrite) {
  const StateDict dict = SampleDict();
  const std::string path = Path("written.pt");
  ASSERT_TRUE(WriteStateDict(path, dict).ok());
  std::ofstream manifest(Path("written.txt"));
  for (const std::string& line : ManifestLines(dict)) manifest << line << '\n';
  manifest.close();
  const PythonRun check = RunPython(*dir_, kPythonCheck, path + " " + Path("written.txt"));
  EXPECT_EQ(check.exit_code, 0) << check.output;
}

TEST_F(StateDictIoTest, RoundTripKeepsOrderValuesAndSeparatesTiedEntries) {
  const StateDict dict = SampleDict();
  const std::string path = Path("roundtrip.pt");
  ASSERT_TRUE(WriteStateDict(path, dict).ok());
  absl::StatusOr<StateDict> read = ReadStateDict(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(ManifestLines(*read), ManifestLines(dict));
  at::Tensor tied_a = (*read)[12].second, tied_b = (*read)[13].second;
  tied_a.fill_(0);
  EXPECT_TRUE(at::equal(tied_b, dict[13].second)) << "tied entries came back aliased";

  ASSERT_TRUE(WriteStateDict(path, {{"only", at::ones({2})}}).ok());  // overwrites in place
  read = ReadStateDict(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ(read->front().first, "only");

  ASSERT_TRUE(WriteStateDict(path, {}).ok());
  read = ReadStateDict(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->empty());
}

// The records of a torch.save-format zip, by name without the archive's folder ("data.pkl",
// "data/0", ...).
std::map<std::string, std::string> ZipRecords(const std::string& bytes) {
  std::istringstream in(bytes);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  std::map<std::string, std::string> records;
  for (const std::string& name : reader.getAllRecords()) {
    auto [data, size] = reader.getRecord(name);
    records[name] = std::string(static_cast<const char*>(data.get()), size);
  }
  return records;
}

// The GLOBALs a protocol-2 pickle imports ("torch._utils _rebuild_tensor_v2", ...): opcode 'c'
// followed by "module\nname\n". Scanning bytes over-approximates (a string may hold a 'c'), so
// only names that look like dotted identifiers are collected.
std::set<std::string> PickleGlobals(const std::string& pickle) {
  static const std::regex kGlobal(R"(c([A-Za-z_][A-Za-z0-9_.]*)\n([A-Za-z_][A-Za-z0-9_]*)\n)");
  std::set<std::string> globals;
  for (std::sregex_iterator it(pickle.begin(), pickle.end(), kGlobal), end; it != end; ++it) {
    globals.insert((*it)[1].str() + "." + (*it)[2].str());
  }
  return globals;
}

// What torch::pickle_save writes, less its TorchScript type tag: the same tensor records, and a
// data.pkl that imports only what torch.load(weights_only=True) allows — LibTorch's pickle_save
// wraps the dict in torch.jit._pickle.restore_type_tag, which PyTorch 2.x refuses to load.
TEST_F(StateDictIoTest, WritesPickleSaveFormatWithoutTheTypeTag) {
  StateDict dict = {{"w", at::randn({3, 2})},
                    {"b", at::arange(4, at::kLong)},
                    {"h", at::randn({5}).to(at::kBFloat16)}};
  c10::Dict<std::string, at::Tensor> entries;
  // The Pickler memoizes values referenced more than once, so hand it sole references, as
  // WriteStateDict does.
  for (const auto& [name, tensor] : dict) entries.insert(name, tensor.detach());
  const std::vector<char> saved = torch::pickle_save(entries);
  ASSERT_TRUE(WriteStateDict(Path("ours.pt"), dict).ok());
  const auto theirs = ZipRecords(std::string(saved.begin(), saved.end()));
  const auto ours = ZipRecords(ReadBytes(Path("ours.pt")));
  ASSERT_TRUE(theirs.count("data.pkl") && ours.count("data.pkl"));
  EXPECT_TRUE(PickleGlobals(theirs.at("data.pkl")).count("torch.jit._pickle.restore_type_tag"));
  const std::set<std::string> allowed = {"torch._utils._rebuild_tensor_v2", "torch.FloatStorage",
                                         "torch.LongStorage", "torch.BFloat16Storage",
                                         "collections.OrderedDict"};
  const std::set<std::string> globals = PickleGlobals(ours.at("data.pkl"));
  EXPECT_TRUE(globals.count("torch._utils._rebuild_tensor_v2"));
  for (const std::string& g : globals) EXPECT_TRUE(allowed.count(g)) << "imports " << g;
  for (const auto& [name, bytes] : theirs) {
    if (name == "data.pkl") continue;
    ASSERT_TRUE(ours.count(name)) << name;
    if (name.rfind("data/", 0) == 0) {
      EXPECT_EQ(ours.at(name), bytes) << name;
    }
  }
}

void ExpectError(const absl::StatusOr<StateDict>& result, absl::StatusCode code,
                 const std::vector<std::string>& mentions) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), code) << result.status();
  for (const std::string& text : mentions) {
    EXPECT_NE(result.status().message().find(text), absl::string_view::npos)
        << "'" << text << "' missing from: " << result.status();
  }
}

TEST_F(StateDictIoTest, RejectsWhatIsNotADictOfTensors) {
  ASSERT_EQ(Fixtures().exit_code, 0) << Fixtures().output;
  const auto invalid = absl::StatusCode::kInvalidArgument;
  ExpectError(ReadStateDict(Path("list.pt")), invalid, {Path("list.pt"), "list"});
  ExpectError(ReadStateDict(Path("int_value.pt")), invalid, {"'step'", "int"});
  ExpectError(ReadStateDict(Path("int_key.pt")), invalid, {"key", "int"});
  ExpectError(ReadStateDict(Path("unknown_global.pt")), invalid, {"collections.Counter"});
  ExpectError(ReadStateDict(Path("legacy.pt")), invalid,
              {Path("legacy.pt"), "_use_new_zipfile_serialization=False", "re-save"});
}

TEST_F(StateDictIoTest, ReportsMissingAndShortFiles) {
  ASSERT_EQ(Fixtures().exit_code, 0) << Fixtures().output;
  ExpectError(ReadStateDict(Path("no_such.pt")), absl::StatusCode::kNotFound, {"no_such.pt"});
  ExpectError(ReadStateDict(Path("short_record.pt")), absl::StatusCode::kDataLoss,
              {Path("short_record.pt"), "record 'data/0' holds 48 bytes"});
}

TEST_F(StateDictIoTest, EveryTruncationIsDataLoss) {
  ASSERT_EQ(Fixtures().exit_code, 0) << Fixtures().output;
  const std::string whole = ReadBytes(Path("views.pt"));
  const std::string path = Path("truncated.pt");
  for (size_t length = 0; length < whole.size(); length += length < 128 ? 1 : 7) {
    WriteBytes(path, absl::string_view(whole).substr(0, length));
    ExpectError(ReadStateDict(path), absl::StatusCode::kDataLoss, {path});
  }
}

TEST_F(StateDictIoTest, ByteFlipsGiveAnErrorOrTheOriginal) {
  ASSERT_EQ(Fixtures().exit_code, 0) << Fixtures().output;
  const std::string whole = ReadBytes(Path("ordered.pt"));
  const std::vector<std::string> original = ReadLines(Path("ordered.txt"));
  const std::string path = Path("flipped.pt");
  std::mt19937 rng(1234);
  int errors = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string bytes = whole;
    const int flips = 1 + trial % 4;
    for (int f = 0; f < flips; ++f)
      bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
    WriteBytes(path, bytes);
    absl::StatusOr<StateDict> result = ReadStateDict(path);
    if (result.ok()) {
      // Only padding and unchecked header fields can change without an error; data is CRC'd.
      EXPECT_EQ(ManifestLines(*result), original) << "trial " << trial;
    } else {
      ++errors;
      EXPECT_TRUE(result.status().code() == absl::StatusCode::kDataLoss ||
                  result.status().code() == absl::StatusCode::kInvalidArgument)
          << result.status();
    }
  }
  EXPECT_GT(errors, 100);
}

// The unpickler on its own, past the zip CRCs: mutated pickles must only ever produce errors.
absl::StatusOr<StorageRecord> ZeroStorage(const std::string& key, size_t bytes) {
  return StorageRecord{at::zeros({static_cast<int64_t>(bytes)}, at::kByte).storage(),
                       "data/" + key};
}

// Protocol 2 (torch.save's default) and protocol 4 (FRAME, MEMOIZE, STACK_GLOBAL).
TEST_F(StateDictIoTest, MutatedPicklesOnlyEverFail) {
  ASSERT_EQ(Fixtures().exit_code, 0) << Fixtures().output;
  for (const char* name : {"ordered.pkl", "proto4.pkl"}) {
    SCOPED_TRACE(name);
    const std::string pickle = ReadBytes(Path(name));
    auto loader = [](const std::string& key) { return ZeroStorage(key, 4096); };
    ASSERT_TRUE(UnpickleStateDict(pickle, loader).ok());
    for (size_t length = 0; length < pickle.size(); ++length) {
      ExpectError(UnpickleStateDict(absl::string_view(pickle).substr(0, length), loader),
                  absl::StatusCode::kDataLoss, {});
    }
    std::mt19937 rng(99);
    for (int trial = 0; trial < 10000; ++trial) {
      std::string bytes = pickle;
      for (int f = 0; f < 1 + trial % 3; ++f) {
        const size_t at = rng() % bytes.size();
        switch (rng() % 3) {
          case 0: bytes[at] ^= static_cast<char>(1 + rng() % 255); break;
          case 1: bytes.erase(at, 1 + rng() % 4); break;
          default: bytes.insert(at, 1, static_cast<char>(rng())); break;
        }
        if (bytes.empty()) bytes = "x";
      }
      const size_t storage_bytes = rng() % 2 ? 4096 : rng() % 64;
      absl::StatusOr<StateDict> result = UnpickleStateDict(
          bytes, [&](const std::string& key) { return ZeroStorage(key, storage_bytes); });
      if (!result.ok()) {
        EXPECT_TRUE(result.status().code() == absl::StatusCode::kDataLoss ||
                    result.status().code() == absl::StatusCode::kInvalidArgument)
            << result.status();
      }
    }
  }
}

// Hand-assembled pickles for what the fixtures do not reach.
std::string Str(const std::string& s) {
  const uint32_t n = s.size();
  return "X" + std::string(reinterpret_cast<const char*>(&n), 4) + s;
}
std::string Global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
std::string Tensor(const std::string& offset, const std::string& size, const std::string& stride) {
  return Global("torch._utils", "_rebuild_tensor_v2") + "((" + Str("storage") +
         Global("torch", "FloatStorage") + Str("0") + Str("cpu") + "K\x05tQ" + offset + size +
         stride + "\x89" + Global("collections", "OrderedDict") + ")Rt" + "R";
}

TEST_F(StateDictIoTest, HandBuiltPickles) {
  using namespace std::string_literals;
  auto loader = [](const std::string& key) -> absl::StatusOr<StorageRecord> {
    at::Tensor values = at::arange(5, at::kFloat);  // storage '0' holds 0 1 2 3 4
    return StorageRecord{values.storage(), "data/" + key};
  };
  const std::string one = "K\x01\x85"s, two = "K\x02\x85"s;  // the tuples (1,) and (2,)
  // LONG1 offsets, and SETITEM re-setting "b": it keeps its first place but takes the new value.
  const std::string dict_body = "\x80\x02}q\x00"s + Str("b") + Tensor("\x8a\x01\x01"s, two, one) +
                                "s" + Str("a") + Tensor("K\x00"s, one, one) + "s" + Str("b") +
                                Tensor("\x8a\x01\x03"s, two, one) + "s";
  // BUILD with a state holding a BINFLOAT and a None, as model.state_dict()'s _metadata would.
  const std::string state =
      "}"s + Str("x") + "G\x3f\xf0\x00\x00\x00\x00\x00\x00"s + "s" + Str("y") + "Ns" + "b";
  absl::StatusOr<StateDict> dict = UnpickleStateDict(dict_body + state + ".", loader);
  ASSERT_TRUE(dict.ok()) << dict.status();
  ASSERT_EQ(dict->size(), 2u);
  EXPECT_EQ((*dict)[0].first, "b");
  EXPECT_TRUE(at::equal((*dict)[0].second, at::tensor({3.0f, 4.0f})));
  EXPECT_EQ((*dict)[1].first, "a");
  EXPECT_TRUE(at::equal((*dict)[1].second, at::tensor({0.0f})));

  ExpectError(UnpickleStateDict(dict_body + "0.", loader), absl::StatusCode::kInvalidArgument,
              {"opcode 0x30 ('0')"});  // POP: never emitted by torch.save
  const std::string head = "\x80\x02}"s + Str("t");
  ExpectError(UnpickleStateDict(head + Tensor("\x8a\x01\xff"s, one, one) + "s.", loader),
              absl::StatusCode::kDataLoss, {"offset"});  // LONG1 -1
  ExpectError(UnpickleStateDict(head + Tensor("K\x00"s, "K\x06\x85"s, one) + "s.", loader),
              absl::StatusCode::kDataLoss, {"reaches element 5"});
  // 2^50 elements broadcast (stride 0) from one: valid geometry, but no machine can hold it.
  const std::string huge = "\x8a\x08\0\0\0\0\0\0\x04\0\x85"s;
  ExpectError(UnpickleStateDict(head + Tensor("K\x00"s, huge, "K\x00\x85"s) + "s.", loader),
              absl::StatusCode::kResourceExhausted, {"'t'", "1125899906842624 elements"});
  ExpectError(UnpickleStateDict("\x80\x02I1\n.", loader), absl::StatusCode::kInvalidArgument,
              {"0x49 ('I')"});
  ExpectError(UnpickleStateDict("\x80\x02}(s.", loader), absl::StatusCode::kDataLoss,
              {"underflow"});  // nothing below a MARK may be popped
  ExpectError(UnpickleStateDict("]q\0h\0a."s, loader), absl::StatusCode::kInvalidArgument,
              {"list"});  // a list holding itself

  // A million nested lists, dropped at the end and on an error path: neither may recurse.
  const int depth = 1000000;
  const std::string nested = std::string(depth, ']') + std::string(depth - 1, 'a');
  ExpectError(UnpickleStateDict(nested + ".", loader), absl::StatusCode::kInvalidArgument,
              {"list"});
  ExpectError(UnpickleStateDict("N" + nested + "R", loader), absl::StatusCode::kInvalidArgument,
              {"REDUCE calls a None"});
}

TEST_F(StateDictIoTest, WriteFailuresLeaveNothingBehind) {
  const std::string folder = Path("write_failures");
  fs::create_directories(folder + "/target_is_a_dir");
  absl::Status status = WriteStateDict(folder + "/target_is_a_dir", {{"a", at::ones({2})}});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("target_is_a_dir"), absl::string_view::npos) << status;
  status = WriteStateDict(folder + "/missing/x.pt", {{"a", at::ones({2})}});
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("No such file"), absl::string_view::npos) << status;
  for (const auto& entry : fs::directory_iterator(folder)) {
    EXPECT_EQ(entry.path().filename(), "target_is_a_dir") << "left behind: " << entry.path();
  }

  status = WriteStateDict(folder + "/x.pt", {{"a", at::Tensor()}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  status = WriteStateDict(folder + "/x.pt", {{"a", at::ones({1})}, {"a", at::ones({1})}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("'a' appears twice"), absl::string_view::npos) << status;
  EXPECT_FALSE(fs::exists(folder + "/x.pt"));
}

}  // namespace
}  // namespace ringtrain
