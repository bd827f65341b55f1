#include "tests/deploy/deploy_test_util.h"

#include <filesystem>
#include <regex>

namespace ringtrain::testing {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string DeployTestsDir() { return SourceDir() + "/tests/deploy"; }

bool IsExecutable(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_regular_file(path, ec) &&
         (fs::status(path, ec).permissions() & fs::perms::owner_exec) != fs::perms::none;
}

}  // namespace

std::string DeployDir() { return SourceDir() + "/deploy"; }

std::string KubectlPath() { return IsExecutable(RINGTRAIN_KUBECTL) ? RINGTRAIN_KUBECTL : ""; }

std::string ValidatorPython() { return IsExecutable(PythonPath()) ? PythonPath() : ""; }

std::string ValidatorPackagesProblem() {
  if (ValidatorPython().empty()) return "no Python at RINGTRAIN_PYTHON=\"" + PythonPath() + "\"\n";
  // Each name==version of requirements.txt installed at that version, and the modules importable.
  static constexpr char kCheck[] = R"py(import importlib.metadata as m, sys
bad = []
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, want = line.split("==")
        try:
            have = m.version(name)
        except m.PackageNotFoundError:
            have = "not installed"
        if have != want:
            bad.append("%s==%s is required, found %s" % (name, want, have))
if bad:
    sys.exit("\n".join(bad))
import yaml, jsonschema, kubernetes_validate, cloudcoil.resources
)py";
  const CommandResult r =
      RunCommand({ValidatorPython(), "-c", kCheck, DeployTestsDir() + "/requirements.txt"});
  return r.exit_code == 0 ? "" : r.output;
}

std::string ToolHint() {
  return "HINT: run scripts/setup.sh (it creates .venv and installs tests/deploy/requirements.txt "
         "into it; CMake's RINGTRAIN_PYTHON names another interpreter); kubectl (1.32, with its "
         "built-in kustomize) must be on PATH when CMake configures";
}

CommandResult ValidateManifests(const std::vector<std::string>& files, const std::string& dump_json,
                                bool schema) {
  std::vector<std::string> argv = {ValidatorPython(), DeployTestsDir() + "/validate_manifests.py"};
  if (!schema) argv.push_back("--parse-only");
  if (!dump_json.empty()) {
    argv.push_back("--dump-json");
    argv.push_back(dump_json);
  }
  argv.insert(argv.end(), files.begin(), files.end());
  return RunCommand(argv);
}

Rendered RenderOverlay(const std::string& overlay, bool with_prometheus_operator, bool schema) {
  Rendered out;
  TempDir tmp;
  std::string root = DeployDir() + "/k8s/" + overlay;
  if (with_prometheus_operator) {
    // kustomize takes only relative paths to other kustomizations.
    const std::string k8s = fs::relative(DeployDir() + "/k8s", tmp.path()).string();
    WriteFile(tmp / "kustomization.yaml",
              "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
              "resources:\n  - " +
                  k8s + "/" + overlay +
                  "\n"
                  "components:\n  - " +
                  k8s + "/components/prometheus-operator\n");
    root = tmp.path();
  }
  const std::string yaml_path = tmp / "rendered.yaml";
  const std::string json_path = tmp / "rendered.json";
  out.render = RunCommand({KubectlPath(), "kustomize", root, "--output", yaml_path});
  if (out.render.exit_code != 0) return out;
  out.yaml = ReadFile(yaml_path);
  out.validate = ValidateManifests({yaml_path}, json_path, schema);
  if (fs::exists(json_path)) out.objects = json::parse(ReadFile(json_path));
  return out;
}

std::vector<const json*> ObjectsOfKind(const json& objects, std::string_view kind) {
  std::vector<const json*> out;
  for (const json& o : objects) {
    if (o.value("kind", "") == kind) out.push_back(&o);
  }
  return out;
}

const json* FindObject(const json& objects, std::string_view kind, std::string_view name) {
  for (const json* o : ObjectsOfKind(objects, kind)) {
    if ((*o)["metadata"].value("name", "") == name) return o;
  }
  return nullptr;
}

std::vector<const json*> Workloads(const json& objects) {
  std::vector<const json*> out = ObjectsOfKind(objects, "Deployment");
  for (const json* s : ObjectsOfKind(objects, "StatefulSet")) out.push_back(s);
  return out;
}

const json* FindContainer(const json& workload, std::string_view name) {
  for (const json& c : workload["spec"]["template"]["spec"]["containers"]) {
    if (c.value("name", "") == name) return &c;
  }
  return nullptr;
}

bool SelectorMatches(const json& selector, const json& labels) {
  if (!selector.is_object() || selector.empty() || !labels.is_object()) return false;
  for (const auto& [key, value] : selector.items()) {
    if (!labels.contains(key) || labels[key] != value) return false;
  }
  return true;
}

std::map<std::string, std::string> ContainerEnv(const json& container) {
  std::map<std::string, std::string> env;
  for (const json& e : container.value("env", json::array())) {
    if (e.contains("value")) {
      env[e["name"]] = e["value"].get<std::string>();
    } else if (e.contains("valueFrom") && e["valueFrom"].contains("fieldRef")) {
      env[e["name"]] = "<" + e["valueFrom"]["fieldRef"]["fieldPath"].get<std::string>() + ">";
    }
  }
  return env;
}

std::vector<std::string> EffectiveArgs(const json& container) {
  const std::map<std::string, std::string> env = ContainerEnv(container);
  static const std::regex kReference(R"(\$\(([A-Za-z_][A-Za-z0-9_]*)\))");
  std::vector<std::string> out;
  for (const char* field : {"command", "args"}) {
    for (const json& a : container.value(field, json::array())) {
      const std::string arg = a.get<std::string>();
      std::string expanded;
      auto last = arg.cbegin();
      for (std::sregex_iterator it(arg.begin(), arg.end(), kReference), end; it != end; ++it) {
        expanded.append(last, arg.cbegin() + it->position());
        auto found = env.find((*it)[1].str());
        expanded += found != env.end() ? found->second : it->str();  // unknown: left as is
        last = arg.cbegin() + it->position() + it->length();
      }
      expanded.append(last, arg.cend());
      out.push_back(expanded);
    }
  }
  return out;
}

std::optional<std::string> FlagValue(const std::vector<std::string>& args, std::string_view flag) {
  const std::string with_equals = std::string(flag) + "=";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind(with_equals, 0) == 0) return args[i].substr(with_equals.size());
    if (args[i] == flag && i + 1 < args.size()) return args[i + 1];
  }
  return std::nullopt;
}

int PortOf(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return -1;
  try {
    return std::stoi(host_port.substr(colon + 1));
  } catch (const std::exception&) {
    return -1;
  }
}

int ResolvePort(const json& container, const json& port) {
  for (const json& p : container.value("ports", json::array())) {
    const int number = p["containerPort"];
    if (port.is_number_integer() && port.get<int>() == number) return number;
    if (port.is_string() && p.value("name", "") == port.get<std::string>()) return number;
  }
  return -1;
}

}  // namespace ringtrain::testing
