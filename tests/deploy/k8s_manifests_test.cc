// Cross-checks of the rendered deploy/k8s overlays: what a schema cannot see. Services reach
// container ports that exist, probes and scrape annotations point at the ports the binaries
// listen on, each worker advertises its headless-Service DNS name, one image everywhere, the
// security context, the volumes behind every written path, and the GPU overlay's one GPU per
// worker.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "tests/deploy/deploy_test_util.h"

namespace ringtrain::testing {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kNamespace[] = "ringtrain";

class DeployManifestsTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(KubectlPath().empty()) << "no kubectl. " << ToolHint();
    ASSERT_FALSE(ValidatorPython().empty()) << "no Python for the validator. " << ToolHint();
    rendered_ = RenderOverlay(std::string("overlays/") + GetParam(),
                              /*with_prometheus_operator=*/false, /*schema=*/false);
    ASSERT_EQ(rendered_.render.exit_code, 0) << rendered_.render.output;
    ASSERT_TRUE(rendered_.objects.is_array() && !rendered_.objects.empty())
        << rendered_.validate.output;
    coordinator_ = FindObject(objects(), "Deployment", "ringtrain-coordinator");
    worker_ = FindObject(objects(), "StatefulSet", "ringtrain-worker");
    ASSERT_NE(coordinator_, nullptr);
    ASSERT_NE(worker_, nullptr);
    coordinator_container_ = FindContainer(*coordinator_, "coordinator");
    worker_container_ = FindContainer(*worker_, "worker");
    ASSERT_NE(coordinator_container_, nullptr);
    ASSERT_NE(worker_container_, nullptr);
  }

  const json& objects() const { return rendered_.objects; }
  bool gpu() const { return std::string(GetParam()) == "gpu"; }

  Rendered rendered_;
  const json* coordinator_ = nullptr;
  const json* worker_ = nullptr;
  const json* coordinator_container_ = nullptr;
  const json* worker_container_ = nullptr;
};

TEST_P(DeployManifestsTest, EveryNamespacedObjectIsInTheNamespace) {
  ASSERT_NE(FindObject(objects(), "Namespace", kNamespace), nullptr);
  for (const json& o : objects()) {
    if (o["kind"] == "Namespace") continue;
    EXPECT_EQ(o["metadata"].value("namespace", ""), kNamespace)
        << o["kind"] << "/" << o["metadata"]["name"];
  }
  EXPECT_EQ((*coordinator_)["spec"]["replicas"], 1);
  EXPECT_EQ((*coordinator_)["spec"]["strategy"]["type"], "Recreate")
      << "one SQLite file on a ReadWriteOnce volume: two coordinators must never overlap";
}

TEST_P(DeployManifestsTest, ServiceTargetPortsNameContainerPortsOfTheSelectedPods) {
  const auto services = ObjectsOfKind(objects(), "Service");
  ASSERT_EQ(services.size(), 2u);
  for (const json* service : services) {
    const std::string name = (*service)["metadata"]["name"];
    SCOPED_TRACE("Service " + name);
    const json& selector = (*service)["spec"]["selector"];
    int selected = 0;
    for (const json* workload : Workloads(objects())) {
      if (!SelectorMatches(selector, (*workload)["spec"]["template"]["metadata"]["labels"])) {
        continue;
      }
      ++selected;
      for (const json& port : (*service)["spec"]["ports"]) {
        const json target = port.value("targetPort", port["port"]);
        bool found = false;
        for (const json& c : (*workload)["spec"]["template"]["spec"]["containers"]) {
          if (ResolvePort(c, target) != -1) found = true;
        }
        EXPECT_TRUE(found) << "targetPort " << target << " of port " << port.value("name", "")
                           << " is no container port of " << (*workload)["metadata"]["name"];
        EXPECT_TRUE(target.is_string()) << "name the port (" << target << ")";
      }
    }
    EXPECT_EQ(selected, 1) << "the selector must select exactly one workload's pods";
  }
}

TEST_P(DeployManifestsTest, ProbesPointAtTheHealthAndMetricsPorts) {
  // Coordinator: its gRPC port (the port of --listen) serves TLS, which the kubelet's gRPC probe
  // cannot speak: startup connects to it, readiness asks grpc.health.v1 over TLS with the image's
  // ringtrain-health (exec), liveness reads /metrics.
  const auto args = EffectiveArgs(*coordinator_container_);
  const auto listen = FlagValue(args, "--listen");
  ASSERT_TRUE(listen.has_value());
  const int grpc_port = PortOf(*listen);
  EXPECT_EQ(ResolvePort(*coordinator_container_, "grpc"), grpc_port);
  {
    ASSERT_TRUE(coordinator_container_->contains("startupProbe"));
    const json& p = (*coordinator_container_)["startupProbe"];
    ASSERT_TRUE(p.contains("tcpSocket")) << p;
    EXPECT_EQ(ResolvePort(*coordinator_container_, p["tcpSocket"]["port"]), grpc_port);
  }
  {
    ASSERT_TRUE(coordinator_container_->contains("readinessProbe"));
    const json& p = (*coordinator_container_)["readinessProbe"];
    ASSERT_TRUE(p.contains("exec")) << p;
    const std::vector<std::string> command = p["exec"]["command"].get<std::vector<std::string>>();
    ASSERT_FALSE(command.empty());
    EXPECT_EQ(command[0], "ringtrain-health");
    const auto address = FlagValue(command, "--address");
    ASSERT_TRUE(address.has_value()) << p;
    EXPECT_EQ(PortOf(*address), grpc_port);
    EXPECT_EQ(FlagValue(command, "--tls-ca"),
              std::optional<std::string>("/etc/ringtrain/tls/ca.crt"))
        << "the probe checks the server against the ca.crt of the TLS Secret";
  }
  {
    ASSERT_TRUE(coordinator_container_->contains("livenessProbe"));
    const json& p = (*coordinator_container_)["livenessProbe"];
    ASSERT_TRUE(p.contains("httpGet")) << p;
    EXPECT_EQ(p["httpGet"]["path"], "/metrics");
    const auto metrics = FlagValue(args, "--metrics-address");
    ASSERT_TRUE(metrics.has_value());
    EXPECT_EQ(ResolvePort(*coordinator_container_, p["httpGet"]["port"]), PortOf(*metrics));
  }
  // Worker: no gRPC server; its /metrics endpoint is the health check.
  const auto metrics = FlagValue(EffectiveArgs(*worker_container_), "--metrics-address");
  ASSERT_TRUE(metrics.has_value());
  for (const char* probe : {"readinessProbe", "livenessProbe"}) {
    SCOPED_TRACE(std::string("worker ") + probe);
    ASSERT_TRUE(worker_container_->contains(probe));
    const json& p = (*worker_container_)[probe];
    ASSERT_TRUE(p.contains("httpGet")) << p;
    EXPECT_EQ(p["httpGet"]["path"], "/metrics");
    EXPECT_EQ(ResolvePort(*worker_container_, p["httpGet"]["port"]), PortOf(*metrics));
  }
}

TEST_P(DeployManifestsTest, ScrapeAnnotationsAndMetricsPortsMatchTheFlags) {
  for (const auto& [workload, container] :
       {std::pair{coordinator_, coordinator_container_}, std::pair{worker_, worker_container_}}) {
    SCOPED_TRACE((*workload)["metadata"]["name"].get<std::string>());
    const auto metrics = FlagValue(EffectiveArgs(*container), "--metrics-address");
    ASSERT_TRUE(metrics.has_value());
    EXPECT_EQ(metrics->rfind("0.0.0.0:", 0), 0u)
        << "must listen on the pod's address: " << *metrics;
    const int port = PortOf(*metrics);
    EXPECT_EQ(ResolvePort(*container, "metrics"), port);
    const json& annotations = (*workload)["spec"]["template"]["metadata"]["annotations"];
    EXPECT_EQ(annotations.value("prometheus.io/scrape", ""), "true");
    EXPECT_EQ(annotations.value("prometheus.io/port", ""), std::to_string(port));
    EXPECT_EQ(annotations.value("prometheus.io/path", ""), "/metrics");
  }
}

TEST_P(DeployManifestsTest, WorkerAdvertisesItsHeadlessServiceDnsName) {
  const std::string service_name = (*worker_)["spec"]["serviceName"];
  const json* service = FindObject(objects(), "Service", service_name);
  ASSERT_NE(service, nullptr) << "StatefulSet.spec.serviceName " << service_name;
  EXPECT_EQ((*service)["spec"].value("clusterIP", ""), "None") << "must be headless";
  EXPECT_EQ((*service)["spec"].value("publishNotReadyAddresses", false), true)
      << "peers must resolve a starting worker's name";
  EXPECT_TRUE(SelectorMatches((*service)["spec"]["selector"],
                              (*worker_)["spec"]["template"]["metadata"]["labels"]));
  // The pod's own name and namespace come from the downward API; the domain is the cluster's.
  const auto args = EffectiveArgs(*worker_container_);
  EXPECT_EQ(FlagValue(args, "--advertise-address").value_or(""),
            "<metadata.name>." + service_name + ".<metadata.namespace>.svc.cluster.local");
  EXPECT_EQ(FlagValue(args, "--host-label").value_or(""), "<spec.nodeName>");
  // Its worker id is the pod's name, so `ringctl workers` and `kubectl get pods` agree.
  EXPECT_EQ(FlagValue(args, "--worker-id").value_or(""), "<metadata.name>");

  // --coordinator names the coordinator's Service and its gRPC port, in the same namespace.
  const std::string coordinator = FlagValue(args, "--coordinator").value_or("");
  const std::string host = coordinator.substr(0, coordinator.rfind(':'));
  const json* coordinator_service = FindObject(objects(), "Service", host);
  ASSERT_NE(coordinator_service, nullptr) << "--coordinator=" << coordinator;
  bool port_found = false;
  for (const json& p : (*coordinator_service)["spec"]["ports"]) {
    if (p["port"] == PortOf(coordinator) && p.value("targetPort", json()) == "grpc") {
      port_found = true;
    }
  }
  EXPECT_TRUE(port_found) << "--coordinator=" << coordinator;
}

TEST_P(DeployManifestsTest, OneImageAndTagEverywhere) {
  std::set<std::string> images;
  for (const json* w : Workloads(objects())) {
    for (const char* list : {"containers", "initContainers"}) {
      for (const json& c : (*w)["spec"]["template"]["spec"].value(list, json::array())) {
        images.insert(c["image"].get<std::string>());
        EXPECT_EQ(c.value("imagePullPolicy", ""), "IfNotPresent");
      }
    }
  }
  ASSERT_EQ(images.size(), 1u) << "containers run different images";
  const std::string image = *images.begin();
  const size_t slash = image.find('/');
  const size_t colon = image.rfind(':');
  ASSERT_NE(slash, std::string::npos) << image << ": name the registry";
  ASSERT_TRUE(colon != std::string::npos && colon > slash) << image << ": name the tag";
  const std::string tag = image.substr(colon + 1);
  EXPECT_NE(tag, "latest");
  EXPECT_EQ(tag.size() > 5 && tag.substr(tag.size() - 5) == "-cuda", gpu())
      << image << ": the gpu overlay runs the CUDA image (tag ...-cuda), the cpu overlay not";
}

// The image the overlay runs is the one deploy/docker builds (and scripts/image.sh tags): named
// ringtrain, the CUDA one for the gpu overlay, and every port a container declares is one the
// image's Dockerfile EXPOSEs.
TEST_P(DeployManifestsTest, ImageNameAndPortsAgreeWithTheDockerfile) {
  const std::string dockerfile =
      ReadFile(DeployDir() + (gpu() ? "/docker/Dockerfile.cuda" : "/docker/Dockerfile"));
  std::set<int> exposed;
  static const std::regex kExpose(R"((^|\n)EXPOSE ([0-9 ]+))");
  for (std::sregex_iterator it(dockerfile.begin(), dockerfile.end(), kExpose), end; it != end;
       ++it) {
    std::istringstream ports((*it)[2].str());
    for (int port; ports >> port;) exposed.insert(port);
  }
  ASSERT_FALSE(exposed.empty()) << "the Dockerfile EXPOSEs no port";
  const std::string image_script = ReadFile(SourceDir() + "/scripts/image.sh");
  EXPECT_NE(image_script.find("image=${RINGTRAIN_IMAGE:-localhost/ringtrain:dev}"),
            std::string::npos)
      << "scripts/image.sh tags the image REGISTRY/ringtrain:TAG (-cuda for the CUDA one)";
  for (const json* w : Workloads(objects())) {
    for (const json& c : (*w)["spec"]["template"]["spec"]["containers"]) {
      const std::string image = c["image"].get<std::string>();
      const std::string repository = image.substr(0, image.rfind(':'));
      EXPECT_EQ(repository.substr(repository.rfind('/') + 1), "ringtrain") << image;
      for (const json& port : c.value("ports", json::array())) {
        EXPECT_TRUE(exposed.count(port["containerPort"].get<int>()))
            << c["name"] << " declares port " << port["containerPort"]
            << ", which the image does not EXPOSE";
      }
    }
  }
}

TEST_P(DeployManifestsTest, PodsRunAsNonRootWithReadOnlyRootAndNoCapabilities) {
  for (const json* w : Workloads(objects())) {
    const json& pod = (*w)["spec"]["template"]["spec"];
    SCOPED_TRACE((*w)["metadata"]["name"].get<std::string>());
    EXPECT_EQ(pod.value("automountServiceAccountToken", true), false);
    EXPECT_EQ(pod["securityContext"].value("runAsNonRoot", false), true);
    EXPECT_EQ(pod["securityContext"].value("runAsUser", -1), kImageUid);
    EXPECT_EQ(pod["securityContext"].value("runAsGroup", -1), kImageUid);
    EXPECT_EQ(pod["securityContext"]["seccompProfile"].value("type", ""), "RuntimeDefault");
    for (const json& c : pod["containers"]) {
      const json& sc = c["securityContext"];
      EXPECT_EQ(sc.value("allowPrivilegeEscalation", true), false);
      EXPECT_EQ(sc.value("readOnlyRootFilesystem", false), true);
      EXPECT_EQ(sc.value("privileged", false), false);
      EXPECT_EQ(sc["capabilities"].value("drop", json::array()), json::array({"ALL"}));
      EXPECT_FALSE(sc["capabilities"].contains("add"));
      for (const char* kind : {"requests", "limits"}) {
        for (const char* resource : {"cpu", "memory"}) {
          EXPECT_TRUE(c["resources"][kind].contains(resource)) << kind << "." << resource;
        }
      }
    }
  }
  // One trainer at a time per worker: its OMP threads match the cores the pod may use.
  EXPECT_EQ(FlagValue(EffectiveArgs(*worker_container_), "--threads").value_or(""),
            (*worker_container_)["resources"]["limits"]["cpu"].get<std::string>());
}

// With a read-only root, every path a binary writes must be a volume.
TEST_P(DeployManifestsTest, WrittenPathsAreVolumesAndSecretsAreRequired) {
  auto volume_at = [](const json& workload, const json& container,
                      const std::string& path) -> const json* {
    for (const json& m : container["volumeMounts"]) {
      if (m["mountPath"] != path) continue;
      for (const json& v : workload["spec"]["template"]["spec"]["volumes"]) {
        if (v["name"] == m["name"]) return &v;
      }
    }
    return nullptr;
  };
  const std::string db = FlagValue(EffectiveArgs(*coordinator_container_), "--db").value_or("");
  const json* state =
      volume_at(*coordinator_, *coordinator_container_, fs::path(db).parent_path().string());
  ASSERT_NE(state, nullptr) << "--db=" << db << " is not on a volume";
  ASSERT_TRUE(state->contains("persistentVolumeClaim"));
  EXPECT_NE(FindObject(objects(), "PersistentVolumeClaim",
                       (*state)["persistentVolumeClaim"]["claimName"].get<std::string>()),
            nullptr);
  const std::string work = FlagValue(EffectiveArgs(*worker_container_), "--work-dir").value_or("");
  const json* work_volume = volume_at(*worker_, *worker_container_, work);
  ASSERT_NE(work_volume, nullptr) << "--work-dir=" << work << " is not on a volume";
  EXPECT_TRUE(work_volume->contains("emptyDir"));
  // Checkpoints: one claim every worker pod mounts, so a restarted job finds its checkpoint
  // whichever workers its ranks land on (ReadWriteMany).
  const std::string checkpoints =
      FlagValue(EffectiveArgs(*worker_container_), "--checkpoint-root").value_or("");
  const json* shared = volume_at(*worker_, *worker_container_, checkpoints);
  ASSERT_NE(shared, nullptr) << "--checkpoint-root=" << checkpoints << " is not on a volume";
  ASSERT_TRUE(shared->contains("persistentVolumeClaim")) << "checkpoints must outlive the pod";
  const json* claim =
      FindObject(objects(), "PersistentVolumeClaim",
                 (*shared)["persistentVolumeClaim"]["claimName"].get<std::string>());
  ASSERT_NE(claim, nullptr);
  EXPECT_EQ((*claim)["spec"]["accessModes"], json::array({"ReadWriteMany"}))
      << "every worker pod mounts the same checkpoints";
  for (const auto& [workload, container] :
       {std::pair{coordinator_, coordinator_container_}, std::pair{worker_, worker_container_}}) {
    const json* tmp = volume_at(*workload, *container, "/tmp");
    ASSERT_NE(tmp, nullptr);
    EXPECT_TRUE(tmp->contains("emptyDir"));
    // The Secrets are referenced, not shipped, and required: the coordinator listens on the pod's
    // address, which it refuses to do without TLS and both token files.
    for (const std::string path : {"/etc/ringtrain/tls", "/etc/ringtrain/tokens"}) {
      const json* secret = volume_at(*workload, *container, path);
      ASSERT_NE(secret, nullptr) << path;
      ASSERT_TRUE(secret->contains("secret")) << path;
      EXPECT_EQ((*secret)["secret"].value("optional", true), false) << path;
    }
  }
  EXPECT_TRUE(ObjectsOfKind(objects(), "Secret").empty()) << "no Secret is shipped";
}

// Every credential flag names a key of a mounted Secret; a worker is given only what it uses.
TEST_P(DeployManifestsTest, CredentialFlagsNameFilesOfTheMountedSecrets) {
  // The file `path` as the container sees it: a key of the Secret mounted above it (all keys,
  // or only those its volume projects with `items`).
  auto secret_key_at = [](const json& workload, const json& container,
                          const std::string& path) -> std::string {
    for (const json& m : container["volumeMounts"]) {
      const std::string mount = m["mountPath"];
      if (path.rfind(mount + "/", 0) != 0) continue;
      for (const json& v : workload["spec"]["template"]["spec"]["volumes"]) {
        if (v["name"] != m["name"] || !v.contains("secret")) continue;
        const std::string key = path.substr(mount.size() + 1);
        const std::string secret = v["secret"]["secretName"];
        if (!v["secret"].contains("items")) return secret + "/" + key;
        for (const json& item : v["secret"]["items"]) {
          if (item["path"] == key) return secret + "/" + item["key"].get<std::string>();
        }
      }
    }
    return "";
  };
  const auto coordinator_args = EffectiveArgs(*coordinator_container_);
  const std::vector<std::pair<std::string, std::string>> coordinator_files = {
      {"--tls-cert", "ringtrain-tls/tls.crt"},
      {"--tls-key", "ringtrain-tls/tls.key"},
      {"--client-token-file", "ringtrain-tokens/client-token"},
      {"--worker-token-file", "ringtrain-tokens/join-token"}};
  for (const auto& [flag, key] : coordinator_files) {
    const std::string path = FlagValue(coordinator_args, flag).value_or("");
    EXPECT_EQ(secret_key_at(*coordinator_, *coordinator_container_, path), key) << flag;
  }
  const auto worker_args = EffectiveArgs(*worker_container_);
  const std::vector<std::pair<std::string, std::string>> worker_files = {
      {"--tls-ca", "ringtrain-tls/ca.crt"}, {"--join-token-file", "ringtrain-tokens/join-token"}};
  for (const auto& [flag, key] : worker_files) {
    const std::string path = FlagValue(worker_args, flag).value_or("");
    EXPECT_EQ(secret_key_at(*worker_, *worker_container_, path), key) << flag;
  }
  // No server key and no client token in a worker pod.
  EXPECT_EQ(secret_key_at(*worker_, *worker_container_, "/etc/ringtrain/tls/tls.key"), "");
  EXPECT_EQ(secret_key_at(*worker_, *worker_container_, "/etc/ringtrain/tokens/client-token"), "");
}

// The ConfigMap holds configs/ exactly, and deploy/k8s/base/configs (kustomize may only read
// files under its root) is a faithful copy.
TEST_P(DeployManifestsTest, ConfigMapHoldsTheRepositoryConfigs) {
  const json* mounted = nullptr;
  for (const json& v : (*coordinator_)["spec"]["template"]["spec"]["volumes"]) {
    if (v.contains("configMap")) mounted = &v;
  }
  ASSERT_NE(mounted, nullptr);
  const json* config_map =
      FindObject(objects(), "ConfigMap", (*mounted)["configMap"]["name"].get<std::string>());
  ASSERT_NE(config_map, nullptr) << "the mounted ConfigMap is not in the output";
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(SourceDir() + "/configs")) {
    const std::string name = entry.path().filename().string();
    names.insert(name);
    EXPECT_EQ((*config_map)["data"].value(name, ""), ReadFile(entry.path().string()))
        << name << " differs. HINT: cp configs/*.toml deploy/k8s/base/configs/ and list new "
        << "files in deploy/k8s/base/kustomization.yaml";
  }
  std::set<std::string> keys;
  for (const auto& [key, value] : (*config_map)["data"].items()) keys.insert(key);
  EXPECT_EQ(keys, names);
}

TEST_P(DeployManifestsTest, DeviceAndGpuResourcesFollowTheOverlay) {
  const auto args = EffectiveArgs(*worker_container_);
  const json& resources = (*worker_container_)["resources"];
  const json& pod = (*worker_)["spec"]["template"]["spec"];
  if (gpu()) {
    EXPECT_EQ(FlagValue(args, "--device").value_or(""), "cuda:0");
    EXPECT_EQ(resources["limits"].value("nvidia.com/gpu", json()), 1);
    EXPECT_EQ(resources["requests"].value("nvidia.com/gpu", json()), 1);
    EXPECT_FALSE(pod.value("nodeSelector", json::object()).empty());
    EXPECT_FALSE(pod.value("tolerations", json::array()).empty());
    bool shm = false;
    for (const json& m : (*worker_container_)["volumeMounts"]) shm |= m["mountPath"] == "/dev/shm";
    EXPECT_TRUE(shm) << "NCCL needs a larger /dev/shm";
  } else {
    EXPECT_EQ(FlagValue(args, "--device").value_or(""), "cpu");
    EXPECT_FALSE(resources["limits"].contains("nvidia.com/gpu"));
  }
  EXPECT_FALSE((*coordinator_container_)["resources"]["limits"].contains("nvidia.com/gpu"));
}

INSTANTIATE_TEST_SUITE_P(Overlays, DeployManifestsTest, ::testing::Values("cpu", "gpu"));

// For clusters with the Prometheus operator: each ServiceMonitor selects one Service of the
// same namespace that has the port it scrapes.
TEST(DeployServiceMonitorTest, EachSelectsAServiceWithItsPort) {
  ASSERT_FALSE(KubectlPath().empty()) << "no kubectl. " << ToolHint();
  ASSERT_FALSE(ValidatorPython().empty()) << "no Python for the validator. " << ToolHint();
  const Rendered r = RenderOverlay("overlays/cpu", /*with_prometheus_operator=*/true,
                                   /*schema=*/false);
  ASSERT_EQ(r.render.exit_code, 0) << r.render.output;
  const auto monitors = ObjectsOfKind(r.objects, "ServiceMonitor");
  ASSERT_EQ(monitors.size(), 2u);
  for (const json* monitor : monitors) {
    SCOPED_TRACE((*monitor)["metadata"]["name"].get<std::string>());
    EXPECT_EQ((*monitor)["metadata"].value("namespace", ""), kNamespace);
    std::vector<const json*> selected;
    for (const json* service : ObjectsOfKind(r.objects, "Service")) {
      if (SelectorMatches((*monitor)["spec"]["selector"]["matchLabels"],
                          (*service)["metadata"]["labels"])) {
        selected.push_back(service);
      }
    }
    ASSERT_EQ(selected.size(), 1u);
    for (const json& endpoint : (*monitor)["spec"]["endpoints"]) {
      bool found = false;
      for (const json& p : (*selected[0])["spec"]["ports"]) found |= p["name"] == endpoint["port"];
      EXPECT_TRUE(found) << "port " << endpoint["port"];
      EXPECT_EQ(endpoint.value("path", ""), "/metrics");
    }
  }
}

}  // namespace
}  // namespace ringtrain::testing
