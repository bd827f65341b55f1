// Observability end to end: a local cluster trains while a real Prometheus server (Debian's
// `prometheus`) scrapes every process; promtool checks each /metrics page; the exported families
// are exactly tests/integration/metric_names.h; every metric the Grafana dashboard queries exists.
// Prints the scrape cost of a worker (bytes and milliseconds, as Prometheus measured them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/e2e/local_cluster.h"
#include "tests/integration/metric_names.h"

namespace ringtrain::testing {
namespace {

using ::testing::HasSubstr;

// "# TYPE name type" lines of a /metrics page, for the ringtrain_ families.
std::map<std::string, std::string> Families(const std::string& page) {
  std::map<std::string, std::string> families;
  std::regex type_line(R"(^# TYPE (ringtrain_[a-z_]+) ([a-z]+)$)");
  std::istringstream in(page);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, type_line)) families[m[1]] = m[2];
  }
  return families;
}

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-') {
      out += static_cast<char>(c);
    } else {
      char buffer[4];
      std::snprintf(buffer, sizeof(buffer), "%%%02X", c);
      out += buffer;
    }
  }
  return out;
}

// Label names of each ringtrain_ family's samples ("le" of histogram buckets left out), joined
// with commas in sorted order, as metric_names.h writes them.
std::map<std::string, std::string> LabelNames(const std::string& page,
                                              const std::map<std::string, std::string>& families) {
  std::map<std::string, std::set<std::string>> labels;
  std::regex sample(R"(^(ringtrain_[a-z_]+)(\{([^}]*)\})? )");
  std::regex label(R"(([a-z_]+)=")");
  std::istringstream in(page);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (!std::regex_search(line, m, sample)) continue;
    std::string name = m[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const size_t n = std::strlen(suffix);
      if (name.size() <= n || name.compare(name.size() - n, n, suffix) != 0) continue;
      const std::string base = name.substr(0, name.size() - n);
      auto family = families.find(base);
      if (family != families.end() && family->second == "histogram") {
        name = base;
        break;
      }
    }
    std::set<std::string>& names = labels[name];
    const std::string text = m[3];
    for (std::sregex_iterator l(text.begin(), text.end(), label), end; l != end; ++l) {
      if ((*l)[1] != "le") names.insert((*l)[1]);
    }
  }
  std::map<std::string, std::string> joined;
  for (const auto& [name, names] : labels) {
    std::string text;
    for (const std::string& n : names) text += (text.empty() ? "" : ",") + n;
    joined[name] = text;
  }
  return joined;
}

// The result vector of an instant query: one {labels, value} per series.
std::vector<std::pair<std::map<std::string, std::string>, double>> Query(
    const std::string& prometheus, const std::string& promql) {
  const std::string body = HttpGet(prometheus, "/api/v1/query?query=" + UrlEncode(promql));
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  std::vector<std::pair<std::map<std::string, std::string>, double>> out;
  if (j.is_discarded() || j.value("status", "") != "success") return out;
  for (const auto& series : j["data"]["result"]) {
    std::map<std::string, std::string> labels;
    for (auto it = series["metric"].begin(); it != series["metric"].end(); ++it) {
      labels[it.key()] = it.value().get<std::string>();
    }
    out.emplace_back(labels, std::stod(series["value"][1].get<std::string>()));
  }
  return out;
}

TEST(MetricsTest, PrometheusScrapesAClusterWhileItTrains) {
  LocalCluster cluster(4);
  const std::string config = ConfigPath("debug_model.toml");
  v1::Job job = cluster.Submit(config, {"parallelism.data_parallel_replicate_degree=2",
                                        "parallelism.context_parallel_degree=2",
                                        "training.steps=60", "metrics.log_freq=1000"});
  ASSERT_FALSE(job.job_id().empty());

  // A real Prometheus, scraping every second.
  const std::string prometheus = "127.0.0.1:" + std::to_string(FreePort());
  std::string targets;
  for (const std::string& w : cluster.worker_metrics()) {
    targets += (targets.empty() ? "'" : ", '") + w + "'";
  }
  WriteFile(cluster.dir() / "prometheus.yml",
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            "  - job_name: ringtrain-coordinator\n    static_configs:\n      - targets: ['" +
                cluster.coordinator_metrics() +
                "']\n"
                "  - job_name: ringtrain-worker\n    static_configs:\n      - targets: [" +
                targets + "]\n");
  CommandResult check =
      RunCommand({"/usr/bin/promtool", "check", "config", cluster.dir() / "prometheus.yml"});
  ASSERT_EQ(check.exit_code, 0) << check.output;
  Subprocess server =
      StartCommand({"/usr/bin/prometheus", "--config.file=" + (cluster.dir() / "prometheus.yml"),
                    "--storage.tsdb.path=" + (cluster.dir() / "tsdb"),
                    "--web.listen-address=" + prometheus, "--enable-feature=extra-scrape-metrics"},
                   cluster.dir() / "prometheus.log");

  ASSERT_TRUE(cluster.WaitForJob(
      job.job_id(), [](const v1::Job& j) { return j.last_step() >= 10; }, 120, "step 10"));

  // promtool accepts every page, and the ringtrain_ families are exactly the documented list.
  std::map<std::string, std::string> exported, exported_labels;
  std::vector<std::string> pages = {cluster.coordinator_metrics()};
  pages.insert(pages.end(), cluster.worker_metrics().begin(), cluster.worker_metrics().end());
  for (const std::string& address : pages) {
    const std::string page = HttpGet(address, "/metrics");
    ASSERT_FALSE(page.empty()) << "no /metrics at " << address;
    WriteFile(cluster.dir() / "page.txt", page);
    CommandResult lint = RunCommand(
        {"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + (cluster.dir() / "page.txt")});
    EXPECT_EQ(lint.exit_code, 0) << address << ":\n" << lint.output;
    const std::map<std::string, std::string> families = Families(page);
    for (const auto& [name, type] : families) exported[name] = type;
    for (const auto& [name, names] : LabelNames(page, families)) exported_labels[name] = names;
  }
  std::map<std::string, std::string> documented, documented_labels;
  for (const MetricName& m : kMetricNames) {
    documented[m.name] = m.type;
    std::vector<std::string> parts = absl::StrSplit(m.labels, ',', absl::SkipEmpty());
    std::sort(parts.begin(), parts.end());
    documented_labels[m.name] = absl::StrJoin(parts, ",");
  }
  EXPECT_EQ(exported, documented);
  EXPECT_EQ(exported_labels, documented_labels);

  // Every metric the dashboard queries is exported.
  nlohmann::json dashboard =
      nlohmann::json::parse(ReadFile(SourceDir() + "/deploy/grafana/ringtrain.json"));
  const std::vector<std::string> names = SeriesNames();
  const std::set<std::string> series(names.begin(), names.end());
  std::regex metric(R"(ringtrain_[a-z_]+)");
  int expressions = 0;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& node) {
    if (node.is_object()) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        if ((it.key() == "expr" || it.key() == "query") && it.value().is_string()) {
          const std::string expr = it.value().get<std::string>();
          ++expressions;
          for (std::sregex_iterator m(expr.begin(), expr.end(), metric), end; m != end; ++m) {
            EXPECT_TRUE(series.count(m->str()))
                << "the dashboard queries " << m->str() << ", which no process exports: " << expr;
          }
        } else {
          walk(it.value());
        }
      }
    } else if (node.is_array()) {
      for (const auto& child : node) walk(child);
    }
  };
  walk(dashboard);
  EXPECT_GE(expressions, 6);

  // Prometheus sees every target up and every rank's tokens counter rising.
  bool all_up = false;
  std::map<std::string, double> token_rates;
  for (int attempt = 0; attempt < 60 && !(all_up && token_rates.size() == 4); ++attempt) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    auto up = Query(prometheus, "up");
    all_up = up.size() == 5;
    for (const auto& [labels, value] : up) all_up = all_up && value == 1;
    token_rates.clear();
    for (const auto& [labels, value] :
         Query(prometheus, "rate(ringtrain_trainer_tokens_total[5s])")) {
      if (value > 0) token_rates[labels.at("rank")] = value;
    }
  }
  EXPECT_TRUE(all_up) << ReadFile(cluster.dir() / "prometheus.log");
  EXPECT_EQ(token_rates.size(), 4u) << "ranks with a positive token rate";
  for (const auto& [rank, rate] : token_rates) {
    std::printf("rank %s: %.0f tokens/s (Prometheus rate over 5 s)\n", rank.c_str(), rate);
  }
  // What a scrape of a worker costs, as Prometheus measured it.
  for (const auto& [labels, value] :
       Query(prometheus, "scrape_duration_seconds{job=\"ringtrain-worker\"}")) {
    std::printf("scrape of worker %s: %.2f ms", labels.at("instance").c_str(), value * 1000);
    auto size =
        Query(prometheus, "scrape_body_size_bytes{instance=\"" + labels.at("instance") + "\"}");
    if (!size.empty()) std::printf(", %.0f bytes", size[0].second);
    std::printf("\n");
  }

  // When the job has ended, the loss gauge holds the last loss `ringctl watch` streamed.
  ASSERT_TRUE(cluster.WaitForJob(
      job.job_id(),
      [](const v1::Job& j) {
        return j.state() == v1::JOB_STATE_SUCCEEDED || j.state() == v1::JOB_STATE_FAILED;
      },
      180, "end"));
  CommandResult watch = RunCommand({BinDir() + "/ringctl", "watch", job.job_id(), "--coordinator",
                                    cluster.address(), "--output", "json"});
  ASSERT_EQ(watch.exit_code, 0) << watch.output;
  double streamed = std::nan("");
  std::istringstream lines(watch.output);
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
    if (!event.is_discarded() && event.value("event", "") == "step") {
      streamed = event["loss"].get<double>();
    }
  }
  ASSERT_FALSE(std::isnan(streamed));
  // Until Prometheus has scraped the worker after the last step, it holds an earlier loss.
  const std::string loss_query =
      "ringtrain_trainer_loss{rank=\"0\",job_id=\"" + job.job_id() + "\"}";
  std::vector<std::pair<std::map<std::string, std::string>, double>> loss;
  WaitFor(
      [&] {
        loss = Query(prometheus, loss_query);
        return loss.size() == 1 &&
               std::abs(loss[0].second - streamed) <= std::abs(streamed) * 1e-15;
      },
      30);
  ASSERT_EQ(loss.size(), 1u);
  // prometheus-cpp writes 16 significant digits, so equal to within one part in 1e15.
  EXPECT_NEAR(loss[0].second, streamed, std::abs(streamed) * 1e-15);
  std::printf("last loss: streamed %.17g, Prometheus %.17g\n", streamed, loss[0].second);

  server.Stop(std::chrono::seconds(10));
}

}  // namespace
}  // namespace ringtrain::testing
