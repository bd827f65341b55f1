// deploy/: the Grafana dashboard parses, has the panels the observability issue asks for, and
// every expression in it names only metrics from tests/integration/metric_names.h (which the
// /metrics tests compare with what the processes really export); the Prometheus scrape config
// passes `promtool check config` (Debian's prometheus package).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/metric_names.h"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

using nlohmann::json;

std::string OnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  }
  return "";
}

json Dashboard() { return json::parse(ReadFile(SourceDir() + "/deploy/grafana/ringtrain.json")); }

// Every panel, rows' nested panels included.
void CollectPanels(const json& panels, std::vector<json>* out) {
  for (const json& panel : panels) {
    out->push_back(panel);
    if (panel.contains("panels")) CollectPanels(panel["panels"], out);
  }
}

// The ringtrain_* identifiers of a PromQL expression.
std::vector<std::string> MetricNamesIn(const std::string& expr) {
  static const std::regex kName(R"(ringtrain_[A-Za-z0-9_:]*)");
  std::vector<std::string> names;
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), kName);
       it != std::sregex_iterator(); ++it) {
    names.push_back(it->str());
  }
  return names;
}

TEST(MetricNamesTest, FollowPrometheusConventions) {
  std::set<std::string> seen;
  for (const MetricName& m : kMetricNames) {
    const std::string name = m.name, type = m.type, labels = m.labels;
    SCOPED_TRACE(name);
    EXPECT_TRUE(seen.insert(name).second) << "listed twice";
    EXPECT_EQ(name.rfind("ringtrain_", 0), 0u);
    EXPECT_EQ(type == "counter", name.size() > 6 && name.substr(name.size() - 6) == "_total")
        << "counters, and only counters, end in _total";
    EXPECT_TRUE(type == "gauge" || type == "counter" || type == "histogram") << type;
    EXPECT_TRUE(std::string(m.process) == "coordinator" || std::string(m.process) == "worker");
    EXPECT_EQ(labels.find("step"), std::string::npos) << "a step number is an unbounded label";
  }
  EXPECT_EQ(SeriesNames("worker").size() + SeriesNames("coordinator").size(), SeriesNames().size());
}

TEST(DashboardTest, ParsesWithItsVariables) {
  const json dashboard = Dashboard();
  EXPECT_GE(dashboard["schemaVersion"].get<int>(), 36);
  EXPECT_EQ(dashboard["uid"], "ringtrain");
  std::map<std::string, json> variables;
  for (const json& v : dashboard["templating"]["list"]) variables[v["name"]] = v;
  ASSERT_TRUE(variables.count("datasource"));
  EXPECT_EQ(variables["datasource"]["type"], "datasource");
  EXPECT_EQ(variables["datasource"]["query"], "prometheus");
  ASSERT_TRUE(variables.count("job"));
  EXPECT_EQ(variables["job"]["definition"], "label_values(ringtrain_trainer_loss, job_id)");
  EXPECT_EQ(variables["job"]["datasource"]["uid"], "${datasource}");
}

TEST(DashboardTest, HasThePanelsTheIssueAsksFor) {
  std::vector<json> panels;
  CollectPanels(Dashboard()["panels"], &panels);
  std::set<std::string> titles;
  std::set<int> ids;
  for (const json& panel : panels) {
    titles.insert(panel["title"].get<std::string>());
    EXPECT_TRUE(ids.insert(panel["id"].get<int>()).second) << "duplicate id " << panel["id"];
    ASSERT_TRUE(panel.contains("gridPos")) << panel["title"];
    if (panel["type"] == "row") continue;
    EXPECT_EQ(panel["datasource"]["uid"], "${datasource}") << panel["title"];
    EXPECT_FALSE(panel["targets"].empty()) << panel["title"];
  }
  for (const char* title : {"Loss (rank 0)", "Tokens/s per rank", "Step time p50 / p99",
                            "Share of step time waiting on communication", "Peak memory per rank",
                            "Workers by state and queue length", "RPC rate by method and code",
                            "Watch events fanned out and watchers"}) {
    EXPECT_TRUE(titles.count(title)) << "no panel \"" << title << "\"";
  }
}

TEST(DashboardTest, EveryExpressionNamesExportedMetrics) {
  const json dashboard = Dashboard();
  const std::vector<std::string> series = SeriesNames();
  const std::set<std::string> known(series.begin(), series.end());
  std::vector<std::string> exprs;
  std::vector<json> panels;
  CollectPanels(dashboard["panels"], &panels);
  for (const json& panel : panels) {
    if (!panel.contains("targets")) continue;
    for (const json& target : panel["targets"]) {
      ASSERT_TRUE(target.contains("expr")) << panel["title"];
      exprs.push_back(target["expr"]);
    }
  }
  for (const json& v : dashboard["templating"]["list"]) {
    if (v.contains("definition")) exprs.push_back(v["definition"]);
  }
  ASSERT_GE(exprs.size(), 10u);
  std::set<std::string> used;
  for (const std::string& expr : exprs) {
    const std::vector<std::string> names = MetricNamesIn(expr);
    EXPECT_FALSE(names.empty()) << "no ringtrain metric in: " << expr;
    for (const std::string& name : names) {
      EXPECT_TRUE(known.count(name)) << name << " (in " << expr << ") is not exported";
      used.insert(name);
    }
  }
  // The figures the issue names must be on the dashboard.
  for (const char* name :
       {"ringtrain_trainer_loss", "ringtrain_trainer_tokens_total",
        "ringtrain_trainer_step_duration_seconds_bucket",
        "ringtrain_trainer_step_duration_seconds_sum", "ringtrain_trainer_comm_wait_seconds_total",
        "ringtrain_trainer_peak_memory_bytes", "ringtrain_coordinator_workers",
        "ringtrain_coordinator_queue_length", "ringtrain_coordinator_rpcs_total",
        "ringtrain_coordinator_events_fanned_out_total", "ringtrain_coordinator_watchers"}) {
    EXPECT_TRUE(used.count(name)) << name << " is on no panel";
  }
}

// Every expression is valid PromQL: promtool parses each as a recording rule, with Grafana's
// variables replaced by what Grafana would put there.
TEST(DashboardTest, EveryExpressionParses) {
  const std::string promtool = OnPath("promtool");
  ASSERT_FALSE(promtool.empty()) << "promtool not found: install Debian's prometheus package "
                                    "(scripts/setup.sh)";
  std::vector<json> panels;
  CollectPanels(Dashboard()["panels"], &panels);
  std::string rules = "groups:\n  - name: dashboard\n    rules:\n";
  int n = 0;
  for (const json& panel : panels) {
    if (!panel.contains("targets")) continue;
    for (const json& target : panel["targets"]) {
      std::string expr = target["expr"];
      expr = std::regex_replace(expr, std::regex(R"(\$__rate_interval)"), "1m");
      expr = std::regex_replace(expr, std::regex(R"(\$job)"), ".+");
      rules += "      - record: ringtrain:dashboard_" + std::to_string(++n) +
               "\n        expr: " + json(expr).dump() + "\n";
    }
  }
  TempDir dir;
  WriteFile(dir / "rules.yml", rules);
  const CommandResult check = RunCommand({promtool, "check", "rules", dir / "rules.yml"});
  EXPECT_EQ(check.exit_code, 0) << check.output << "\n" << rules;
  EXPECT_NE(check.output.find("SUCCESS: " + std::to_string(n) + " rules found"), std::string::npos)
      << check.output;
}

TEST(PrometheusConfigTest, PromtoolAcceptsItAndItScrapesALocalCluster) {
  const std::string config = SourceDir() + "/deploy/prometheus/prometheus.yml";
  const std::string promtool = OnPath("promtool");
  ASSERT_FALSE(promtool.empty()) << "promtool not found: install Debian's prometheus package "
                                    "(scripts/setup.sh)";
  const CommandResult check = RunCommand({promtool, "check", "config", config});
  EXPECT_EQ(check.exit_code, 0) << check.output;
  const std::string text = ReadFile(config);
  for (const char* part :
       {"job_name: ringtrain-coordinator", "job_name: ringtrain-worker", "scrape_interval: 5s",
        "\"127.0.0.1:9460\"", "\"127.0.0.1:9470\"", "\"127.0.0.1:9473\""}) {
    EXPECT_NE(text.find(part), std::string::npos) << part;
  }
}

}  // namespace
}  // namespace ringtrain::testing
