// Helpers for the deploy tests: render a kustomize overlay of deploy/k8s with kubectl (the one
// CMake found on PATH), validate it with tests/deploy/validate_manifests.py (run on the project's
// .venv Python, into which scripts/setup.sh installs tests/deploy/requirements.txt), and look
// things up in the rendered objects (parsed as JSON).
#ifndef RINGTRAIN_TESTS_DEPLOY_DEPLOY_TEST_UTIL_H_
#define RINGTRAIN_TESTS_DEPLOY_DEPLOY_TEST_UTIL_H_

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {

// The pod's user and group: the Dockerfile's USER and the manifests' runAsUser/runAsGroup.
inline constexpr int kImageUid = 10001;

std::string DeployDir();  // SourceDir()/deploy
// The kubectl CMake found on PATH (RINGTRAIN_KUBECTL), or "" when there is none.
std::string KubectlPath();
// The Python that runs validate_manifests.py (PythonPath(): CMake's RINGTRAIN_PYTHON, the
// project's .venv by default), or "" when it is not there.
std::string ValidatorPython();
// "" when ValidatorPython() has every package of tests/deploy/requirements.txt at its pinned
// version and imports the validator's modules; else what is wrong.
std::string ValidatorPackagesProblem();
// What a test prints when a tool is missing.
std::string ToolHint();

// Runs validate_manifests.py on `files`; with `dump_json`, also writes the objects there. With
// `schema` false it only parses them (needs only PyYAML and is much faster: the cross-checks need
// no schema).
CommandResult ValidateManifests(const std::vector<std::string>& files,
                                const std::string& dump_json = "", bool schema = true);

struct Rendered {
  CommandResult render;    // kubectl kustomize
  CommandResult validate;  // validate_manifests.py (schema, or parse only)
  std::string yaml;        // what kustomize printed
  nlohmann::json objects;  // every object, in order (an array); empty if a step failed
};

// Renders deploy/k8s/<overlay> ("overlays/cpu"); with `with_prometheus_operator`, as an overlay
// that also includes components/prometheus-operator (what deploy/README.md tells operators to do).
// `schema`: as for ValidateManifests.
Rendered RenderOverlay(const std::string& overlay, bool with_prometheus_operator = false,
                       bool schema = true);

// Lookups in a rendered object array. FindObject returns nullptr when there is no such object.
std::vector<const nlohmann::json*> ObjectsOfKind(const nlohmann::json& objects,
                                                 std::string_view kind);
const nlohmann::json* FindObject(const nlohmann::json& objects, std::string_view kind,
                                 std::string_view name);
// Deployments and StatefulSets.
std::vector<const nlohmann::json*> Workloads(const nlohmann::json& objects);
// The container called `name` in a workload's pod template, or nullptr.
const nlohmann::json* FindContainer(const nlohmann::json& workload, std::string_view name);
// True when every key/value of `selector` is among `labels`.
bool SelectorMatches(const nlohmann::json& selector, const nlohmann::json& labels);

// A container's environment as Kubernetes expands $(NAME) in command and args: literal values
// as they are, downward-API values as "<fieldPath>" (e.g. "<metadata.name>").
std::map<std::string, std::string> ContainerEnv(const nlohmann::json& container);
// command + args with every $(NAME) of the container's environment expanded.
std::vector<std::string> EffectiveArgs(const nlohmann::json& container);
// The value of --flag in `args` ("--flag=value" or "--flag value"), if present.
std::optional<std::string> FlagValue(const std::vector<std::string>& args, std::string_view flag);
// The port of "HOST:PORT", or -1.
int PortOf(const std::string& host_port);
// The containerPort that a probe's or Service's port (a number or a port name) refers to, or -1.
int ResolvePort(const nlohmann::json& container, const nlohmann::json& port);

}  // namespace ringtrain::testing

#endif  // RINGTRAIN_TESTS_DEPLOY_DEPLOY_TEST_UTIL_H_
