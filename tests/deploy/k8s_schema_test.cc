// deploy/k8s renders with kustomize and every object validates against the Kubernetes OpenAPI
// schema (and the prometheus-operator CRD schema for ServiceMonitors), unknown fields included;
// and the validator does reject broken manifests (tests/deploy/fixtures), so a pass means
// something.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "tests/deploy/deploy_test_util.h"

namespace ringtrain::testing {
namespace {
namespace fs = std::filesystem;

class DeploySchemaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(KubectlPath().empty()) << "no kubectl. " << ToolHint();
    const std::string problem = ValidatorPackagesProblem();
    ASSERT_TRUE(problem.empty()) << "the validator's Python packages (requirements.txt):\n"
                                 << problem << ToolHint();
  }
};

struct Variant {
  const char* overlay;
  bool with_prometheus_operator;
};

void PrintTo(const Variant& v, std::ostream* os) {
  *os << v.overlay << (v.with_prometheus_operator ? " + components/prometheus-operator" : "");
}

class DeploySchemaOverlayTest : public DeploySchemaTest,
                                public ::testing::WithParamInterface<Variant> {};

TEST_P(DeploySchemaOverlayTest, RendersAndEveryObjectValidates) {
  const Variant v = GetParam();
  const Rendered r = RenderOverlay(v.overlay, v.with_prometheus_operator);
  ASSERT_EQ(r.render.exit_code, 0) << "kubectl kustomize " << v.overlay << ":\n" << r.render.output;
  EXPECT_EQ(r.validate.exit_code, 0) << r.validate.output;
  EXPECT_NE(r.validate.output.find("validated "), std::string::npos) << r.validate.output;
  ASSERT_TRUE(r.objects.is_array());
  const size_t monitors = ObjectsOfKind(r.objects, "ServiceMonitor").size();
  EXPECT_EQ(monitors, v.with_prometheus_operator ? 2u : 0u);
  EXPECT_EQ(r.objects.size(), 8u + monitors)
      << "Namespace, ConfigMap, 2 Services, 2 PVCs (the coordinator's state, the workers' shared "
         "checkpoints), Deployment, StatefulSet expected:\n"
      << r.validate.output;
}

INSTANTIATE_TEST_SUITE_P(
    Overlays, DeploySchemaOverlayTest,
    ::testing::Values(Variant{"overlays/cpu", false}, Variant{"overlays/gpu", false},
                      Variant{"overlays/cpu", true}, Variant{"overlays/gpu", true}),
    [](const auto& info) {
      const std::string overlay = info.param.overlay;
      const std::string name = overlay.substr(overlay.find('/') + 1);
      return info.param.with_prometheus_operator ? name + "_with_servicemonitors" : name;
    });

// Each fixture is one broken manifest whose first line says "# expect: <part of the message>".
TEST_F(DeploySchemaTest, BrokenFixturesAreRejected) {
  std::vector<std::string> fixtures;
  for (const auto& entry : fs::directory_iterator(SourceDir() + "/tests/deploy/fixtures")) {
    if (entry.path().extension() == ".yaml") fixtures.push_back(entry.path().string());
  }
  std::sort(fixtures.begin(), fixtures.end());
  ASSERT_GE(fixtures.size(), 5u);
  for (const std::string& fixture : fixtures) {
    SCOPED_TRACE(fixture);
    const std::string text = ReadFile(fixture);
    const std::string marker = "# expect: ";
    ASSERT_EQ(text.rfind(marker, 0), 0u) << "the first line must be '# expect: ...'";
    const std::string expected = text.substr(marker.size(), text.find('\n') - marker.size());
    const CommandResult r = ValidateManifests({fixture});
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << "expected '" << expected << "' in:\n"
                                                          << r.output;
  }
}

// The same check on the real rendered output: one misspelt key in the worker's probe fails it.
TEST_F(DeploySchemaTest, MisspeltFieldInRenderedOverlayIsRejected) {
  const Rendered r = RenderOverlay("overlays/cpu");
  ASSERT_EQ(r.render.exit_code, 0) << r.render.output;
  std::string yaml = r.yaml;
  const size_t at = yaml.find("readinessProbe:");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, std::string("readinessProbe:").size(), "readinessprobe:");
  TempDir tmp;
  WriteFile(tmp / "broken.yaml", yaml);
  const CommandResult v = ValidateManifests({tmp / "broken.yaml"});
  EXPECT_EQ(v.exit_code, 1) << v.output;
  EXPECT_NE(v.output.find("unknown field \"readinessprobe\""), std::string::npos) << v.output;
}

}  // namespace
}  // namespace ringtrain::testing
