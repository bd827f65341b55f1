// The container images' recipes, checked without a Docker engine (hadolint cannot be installed
// from the registries here, so its rules that matter are written out): multi-stage, bases pinned,
// apt used without recommends and without leaving its lists, a numeric non-root USER, exec-form
// CMD. And the runtime stage's packages provide every shared library the five binaries load
// (ldd + dpkg -S against apt-cache's dependency closure of deploy/docker/runtime-packages.txt),
// and the flags the manifests pass are ones the binaries accept.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/deploy/deploy_test_util.h"

namespace ringtrain::testing {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

// Every binary the image holds (deploy/docker/stage.sh lays them out): the services, the tools and
// the health probe.
const std::vector<std::string> kBinaries = {
    "ringtrain-coordinator", "ringtrain-worker",  "ringtrain-trainer", "ringtrain-run", "ringctl",
    "ringtrain-tokenize",    "ringtrain-convert", "ringtrain-health"};

struct Instruction {
  std::string keyword;  // upper case: RUN, COPY, ...
  std::string args;     // continuation lines joined, comments dropped
};

struct Stage {
  std::string base;  // FROM's image
  std::string name;  // AS name
  std::vector<Instruction> body;
};

// A Dockerfile as stages of instructions (enough of the grammar for these checks).
std::vector<Stage> ParseDockerfile(const std::string& text) {
  std::vector<Stage> stages;
  std::map<std::string, std::string> global_args;  // ARG NAME=default before the first FROM
  std::istringstream in(text);
  std::string line, logical;
  auto flush = [&] {
    static const std::regex kInstruction(R"(^\s*([A-Za-z]+)\s+(.*)$)");
    std::smatch m;
    if (!std::regex_match(logical, m, kInstruction)) return;
    std::string keyword = m[1];
    for (char& c : keyword) c = static_cast<char>(toupper(c));
    if (keyword == "FROM") {
      static const std::regex kFrom(R"(^(?:--\S+\s+)*(\S+)(?:\s+[Aa][Ss]\s+(\S+))?\s*$)");
      std::smatch f;
      const std::string args = m[2];
      if (std::regex_match(args, f, kFrom)) {
        // A base named by a global ARG (FROM ${RUNTIME_BASE}) stands for the ARG's default.
        std::string base = f[1];
        static const std::regex kArgRef(R"(^\$\{?(\w+)\}?$)");
        std::smatch a;
        if (std::regex_match(base, a, kArgRef) && global_args.count(a[1])) base = global_args[a[1]];
        stages.push_back({base, f[2], {}});
      }
    } else if (keyword == "ARG" && stages.empty()) {
      const std::string arg = m[2];
      const size_t eq = arg.find('=');
      if (eq != std::string::npos) global_args[arg.substr(0, eq)] = arg.substr(eq + 1);
    } else if (!stages.empty()) {
      stages.back().body.push_back({keyword, m[2]});
    }
  };
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;  // also inside continuations
    if (!line.empty() && line.back() == '\\') {
      logical += line.substr(0, line.size() - 1) + " ";
      continue;
    }
    logical += line;
    flush();
    logical.clear();
  }
  return stages;
}

// Lint rules (hadolint's DL3000-DL4006 that apply) for one Dockerfile.
void CheckDockerfile(const std::string& path) {
  SCOPED_TRACE(path);
  const std::vector<Stage> stages = ParseDockerfile(ReadFile(path));
  ASSERT_GE(stages.size(), 2u) << "multi-stage: a build stage and a slim runtime stage";
  std::set<std::string> names;
  for (const Stage& stage : stages) {
    SCOPED_TRACE("stage " + stage.name + " FROM " + stage.base);
    EXPECT_FALSE(stage.name.empty()) << "name every stage (FROM image AS name)";
    const bool from_stage = names.count(stage.base) > 0;  // FROM runtime-base AS runtime
    names.insert(stage.name);
    // Pinned: a digest, or a tag carrying an exact version (12.11, 11.7.1-...): not `latest`,
    // not a moving name such as `bookworm`.
    const bool digest = std::regex_search(stage.base, std::regex(R"(@sha256:[0-9a-f]{64}$)"));
    const bool versioned_tag = std::regex_search(stage.base, std::regex(R"(:[^@/]*\d+\.\d+)"));
    EXPECT_TRUE(digest || versioned_tag || from_stage)
        << "pin the base image (an ARG's default) by digest or exact version tag";
    bool pipefail = false;
    for (const Instruction& in : stage.body) {
      SCOPED_TRACE(in.keyword + " " + in.args);
      if (in.keyword == "SHELL") pipefail = in.args.find("pipefail") != std::string::npos;
      EXPECT_NE(in.keyword, "ADD") << "COPY, or RUN curl for downloads (DL3020)";
      EXPECT_NE(in.keyword, "MAINTAINER");
      if (in.keyword == "WORKDIR") {
        EXPECT_EQ(in.args.rfind("/", 0), 0u) << "absolute (DL3000)";
      }
      if (in.keyword == "CMD" || in.keyword == "ENTRYPOINT") {
        EXPECT_EQ(in.args.rfind("[", 0), 0u) << "exec form (DL3025)";
      }
      if (in.keyword == "COPY" && in.args.find("--from=") != std::string::npos) {
        const std::string from = in.args.substr(in.args.find("--from=") + 7);
        EXPECT_TRUE(names.count(from.substr(0, from.find(' '))) > 0)
            << "copy from a stage of this file";
      }
      if (in.keyword != "RUN") continue;
      const std::string& run = in.args;
      EXPECT_EQ(run.find("sudo "), std::string::npos) << "DL3004";
      EXPECT_EQ(run.find("apt-get upgrade"), std::string::npos) << "DL3005";
      EXPECT_EQ(run.find("apt-get dist-upgrade"), std::string::npos) << "DL3005";
      EXPECT_EQ(run.find(" apt "), std::string::npos) << "apt-get, not apt (DL3027)";
      if (std::regex_search(run, std::regex(R"([^|]\|[^|])"))) {
        EXPECT_TRUE(pipefail) << "a pipe in RUN needs SHELL [..., \"-o\", \"pipefail\", ...]";
      }
      if (run.find("apt-get install") != std::string::npos) {
        EXPECT_NE(run.find("--no-install-recommends"), std::string::npos) << "DL3015";
        EXPECT_TRUE(std::regex_search(run, std::regex(R"(apt-get install\s+(\S+\s+)*-y)")))
            << "DL3014";
      }
      const bool apt =
          run.find("apt-get") != std::string::npos || run.find("setup.sh") != std::string::npos;
      if (apt) {
        EXPECT_NE(run.find("rm -rf /var/lib/apt/lists/*"), std::string::npos)
            << "remove the apt lists in the same RUN (DL3009)";
      }
    }
  }
  // The image that runs: a numeric non-root user (Kubernetes' runAsNonRoot can only check a
  // number), the same one the manifests run as. The last stage may build on an earlier one
  // (runtime-base, which `scripts/image.sh package` builds alone): read the chain.
  std::vector<const Stage*> chain = {&stages.back()};
  for (bool more = true; more;) {
    more = false;
    for (const Stage& s : stages) {
      if (&s != chain.front() && s.name == chain.front()->base) {
        chain.insert(chain.begin(), &s);
        more = true;
        break;
      }
    }
  }
  std::string user;
  bool has_cmd = false, copies_stage = false;
  for (const Stage* stage : chain) {
    for (const Instruction& in : stage->body) {
      if (in.keyword == "USER") user = in.args;
      if (in.keyword == "CMD" || in.keyword == "ENTRYPOINT") has_cmd = true;
      copies_stage |= in.keyword == "COPY" && in.args == "--from=build /stage/ /";
    }
  }
  EXPECT_EQ(user, std::to_string(kImageUid) + ":" + std::to_string(kImageUid));
  EXPECT_TRUE(has_cmd);
  // The binaries and the wheel's libraries come as one tree that deploy/docker/stage.sh lays out
  // in the build stage (and `scripts/image.sh package` from a build already made).
  EXPECT_TRUE(copies_stage) << "the runtime stage copies the build stage's /stage/ to /";
  bool runs_stage = false;
  for (const Stage& stage : stages) {
    for (const Instruction& in : stage.body) {
      runs_stage |= stage.name == "build" && in.keyword == "RUN" &&
                    in.args.find("deploy/docker/stage.sh") != std::string::npos;
    }
  }
  EXPECT_TRUE(runs_stage) << "the build stage runs deploy/docker/stage.sh";
  const std::string stage_script = ReadFile(DeployDir() + "/docker/stage.sh");
  for (const std::string& binary : kBinaries) {
    EXPECT_NE(stage_script.find(binary), std::string::npos)
        << binary << " is not laid out by deploy/docker/stage.sh";
  }
}

TEST(DeployDockerfileTest, CpuImageFollowsTheRules) {
  CheckDockerfile(DeployDir() + "/docker/Dockerfile");
}

TEST(DeployDockerfileTest, CudaImageFollowsTheRules) {
  CheckDockerfile(DeployDir() + "/docker/Dockerfile.cuda");
}

TEST(DeployDockerfileTest, BuildStageUsesTheSetupScriptWithoutRecommends) {
  const std::string dockerfile = ReadFile(DeployDir() + "/docker/Dockerfile");
  EXPECT_NE(dockerfile.find("scripts/setup.sh && rm -rf /var/lib/apt/lists/*"), std::string::npos);
  // setup.sh reads the pinned torch version from versions.sh: both images install that one.
  for (const char* name : {"Dockerfile", "Dockerfile.cuda"}) {
    EXPECT_NE(ReadFile(DeployDir() + "/docker/" + name)
                  .find("COPY scripts/setup.sh scripts/versions.sh scripts/"),
              std::string::npos)
        << name;
  }
  EXPECT_NE(dockerfile.find("runtime-packages.txt"), std::string::npos);
  const std::string setup = ReadFile(SourceDir() + "/scripts/setup.sh");
  const size_t install = setup.find("apt-get install");
  ASSERT_NE(install, std::string::npos);
  EXPECT_NE(setup.find("--no-install-recommends", install), std::string::npos);
  // The build context leaves out local builds and the project's virtual environment (.venv).
  for (const char* name : {"Dockerfile.dockerignore", "Dockerfile.cuda.dockerignore"}) {
    const std::string ignore = ReadFile(DeployDir() + "/docker/" + name);
    for (const char* path : {".git", "build", "build-*", ".venv"}) {
      EXPECT_NE(ignore.find(std::string("\n") + path + "\n"), std::string::npos)
          << name << " should exclude " << path;
    }
  }
}

// deploy/docker/runtime-packages.txt without comments.
std::vector<std::string> RuntimePackages() {
  std::vector<std::string> packages;
  std::istringstream in(ReadFile(DeployDir() + "/docker/runtime-packages.txt"));
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string word;
    while (words >> word) packages.push_back(word);
  }
  return packages;
}

// The runtime stage installs only runtime-packages.txt: every library that ldd resolves for the
// image's binaries must belong to one of those packages or to a package they depend on.
TEST(DeployImageTest, RuntimePackagesProvideEverySharedLibrary) {
  std::set<std::string> libraries;
  for (const std::string& binary : kBinaries) {
    const CommandResult ldd = RunCommand({"/usr/bin/ldd", BinDir() + "/" + binary});
    ASSERT_EQ(ldd.exit_code, 0) << binary << ":\n" << ldd.output;
    std::istringstream in(ldd.output);
    std::string line;
    static const std::regex kResolved(R"(=>\s+(/\S+)\s+\(0x)");
    static const std::regex kDirect(R"(^\s*(/\S+)\s+\(0x)");
    while (std::getline(in, line)) {
      EXPECT_EQ(line.find("not found"), std::string::npos) << binary << ": " << line;
      std::smatch m;
      if (std::regex_search(line, m, kResolved) || std::regex_search(line, m, kDirect)) {
        libraries.insert(m[1]);
      }
    }
  }
  ASSERT_GT(libraries.size(), 20u);

  // dpkg knows a file by the path its package installed (/lib/... or /usr/lib/... on a merged-usr
  // system, often a symlink's name): ask for every spelling.
  std::map<std::string, std::vector<std::string>> spellings;
  std::vector<std::string> query = {"/usr/bin/dpkg-query", "--search"};
  for (const std::string& lib : libraries) {
    std::set<std::string> names = {lib, fs::canonical(lib).string()};
    for (const std::string& n : std::set<std::string>(names)) {
      if (n.rfind("/usr/", 0) == 0)
        names.insert(n.substr(4));
      else
        names.insert("/usr" + n);
    }
    spellings[lib].assign(names.begin(), names.end());
    query.insert(query.end(), names.begin(), names.end());
  }
  const CommandResult owners = RunCommand(query);  // exit 1: some spellings are unknown
  std::map<std::string, std::string> owner_of;     // path -> package
  std::istringstream in(owners.output);
  std::string line;
  static const std::regex kOwner(R"(^([^:,\s]+)(?::[a-z0-9]+)?(?:, [^:]+)?: (/\S+)$)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, kOwner)) owner_of[m[2]] = m[1];
  }

  const std::vector<std::string> packages = RuntimePackages();
  ASSERT_FALSE(packages.empty());
  std::vector<std::string> depends = {"/usr/bin/apt-cache", "depends",       "--recurse",
                                      "--no-recommends",    "--no-suggests", "--no-conflicts",
                                      "--no-breaks",        "--no-replaces", "--no-enhances"};
  depends.insert(depends.end(), packages.begin(), packages.end());
  const CommandResult closure_text = RunCommand(depends);
  ASSERT_EQ(closure_text.exit_code, 0) << closure_text.output;
  std::set<std::string> closure;
  std::istringstream closure_in(closure_text.output);
  while (std::getline(closure_in, line)) {
    if (!line.empty() && line[0] != ' ') closure.insert(line.substr(0, line.find(':')));
  }
  for (const std::string& p : packages) EXPECT_TRUE(closure.count(p)) << p << " is unknown to apt";

  // LibTorch's libraries come from the pinned wheel in .venv, not from Debian:
  // deploy/docker/stage.sh (in the CPU image's build stage) copies every library ldd resolves
  // inside the site-packages of .venv for the binaries into /opt/ringtrain/lib, on the runtime
  // stage's LD_LIBRARY_PATH. (The image itself is checked with ldd inside it: scripts/image.sh
  // check, run by scripts/test.sh.)
  const std::string dockerfile = ReadFile(DeployDir() + "/docker/Dockerfile");
  const std::string stage_script = ReadFile(DeployDir() + "/docker/stage.sh");
  EXPECT_NE(stage_script.find("awk -v site=\"$site/\" 'index($3, site) == 1 {print $3}'"),
            std::string::npos)
      << "stage.sh must collect the wheel's libraries with ldd";
  EXPECT_NE(dockerfile.find("--site-packages /src/.venv/lib/python3.11/site-packages"),
            std::string::npos);
  EXPECT_NE(dockerfile.find("LD_LIBRARY_PATH=/opt/ringtrain/lib"), std::string::npos);
  std::set<std::string> from_wheel;
  for (auto it = libraries.begin(); it != libraries.end();) {
    if (it->find("/.venv/") == std::string::npos) {
      ++it;
      continue;
    }
    from_wheel.insert(fs::path(*it).filename().string());
    it = libraries.erase(it);
  }
  EXPECT_TRUE(from_wheel.count("libtorch_cpu.so")) << "LibTorch should come from .venv";

  for (const std::string& lib : libraries) {
    std::string package;
    for (const std::string& s : spellings[lib]) {
      if (owner_of.count(s)) package = owner_of[s];
    }
    if (package.empty()) {
      ADD_FAILURE() << lib << " belongs to no Debian package: it cannot come from the runtime "
                    << "stage's apt-get install";
      continue;
    }
    EXPECT_TRUE(closure.count(package))
        << lib << " comes from " << package << ", which deploy/docker/runtime-packages.txt "
        << "does not bring in: add the runtime package (not -dev) that provides it";
  }
  // Debian's LibTorch is not used any more.
  for (const std::string& p : packages) EXPECT_EQ(p.find("libtorch"), std::string::npos) << p;
}

// Every --flag that a manifest passes is one the binary's --help lists.
TEST(DeployImageTest, ManifestFlagsAreKnownToTheBinaries) {
  ASSERT_FALSE(KubectlPath().empty()) << "no kubectl. " << ToolHint();
  for (const char* overlay : {"overlays/cpu", "overlays/gpu"}) {
    const Rendered r = RenderOverlay(overlay, /*with_prometheus_operator=*/false,
                                     /*schema=*/false);
    ASSERT_EQ(r.render.exit_code, 0) << r.render.output;
    for (const json* w : Workloads(r.objects)) {
      for (const json& c : (*w)["spec"]["template"]["spec"]["containers"]) {
        const std::vector<std::string> args = EffectiveArgs(c);
        ASSERT_FALSE(args.empty());
        const std::string binary = args[0];
        SCOPED_TRACE(std::string(overlay) + " " + binary);
        ASSERT_NE(std::find(kBinaries.begin(), kBinaries.end(), binary), kBinaries.end())
            << "the command must be one of the image's binaries (on its PATH)";
        const CommandResult help = RunCommand({BinDir() + "/" + binary, "--help"});
        ASSERT_EQ(help.exit_code, 0) << help.output;
        for (size_t i = 1; i < args.size(); ++i) {
          if (args[i].rfind("--", 0) != 0) continue;
          const std::string flag = args[i].substr(0, args[i].find('='));
          EXPECT_TRUE(std::regex_search(help.output, std::regex(R"(\s)" + flag + R"((\s|=|,))")))
              << flag << " is not in `" << binary << " --help`";
        }
      }
    }
  }
}

}  // namespace
}  // namespace ringtrain::testing
