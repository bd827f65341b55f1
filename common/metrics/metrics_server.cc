#include "common/metrics/metrics_server.h"

#include <exception>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ringtrain {
namespace {

prometheus::ClientMetric Sample(const MetricLabels& labels) {
  prometheus::ClientMetric metric;
  for (const auto& [name, value] : labels) metric.label.push_back({name, value});
  return metric;
}

prometheus::MetricFamily Family(const std::string& name, const std::string& help,
                                prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  return family;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address,
                                                                    int scan) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address \"", address, "\" is not HOST:PORT (e.g. 127.0.0.1:9460)"));
  }
  const std::string host = address.substr(0, colon);
  std::string last_error;
  for (int i = 0; i < std::max(scan, 1) && port + i <= 65535; ++i) {
    const std::string candidate = absl::StrCat(host, ":", port + i);
    try {
      auto exposer = std::make_unique<prometheus::Exposer>(candidate, /*num_threads=*/1);
      const std::vector<int> ports = exposer->GetListeningPorts();
      const int bound = ports.empty() ? port + i : ports.front();
      return std::unique_ptr<MetricsServer>(
          new MetricsServer(std::move(exposer), absl::StrCat(host, ":", bound)));
    } catch (const std::exception& e) {
      last_error = e.what();
    }
  }
  return absl::UnavailableError(
      absl::StrCat("cannot serve metrics on ", address,
                   scan > 1 ? absl::StrCat(" or the next ", scan - 1, " ports") : std::string(),
                   ": ", last_error, " (choose another --metrics-address)"));
}

void MetricsServer::Register(const std::weak_ptr<prometheus::Collectable>& collectable) {
  exposer_->RegisterCollectable(collectable);
}

prometheus::MetricFamily GaugeFamily(const std::string& name, const std::string& help) {
  return Family(name, help, prometheus::MetricType::Gauge);
}
prometheus::MetricFamily CounterFamily(const std::string& name, const std::string& help) {
  return Family(name, help, prometheus::MetricType::Counter);
}
prometheus::MetricFamily HistogramFamily(const std::string& name, const std::string& help) {
  return Family(name, help, prometheus::MetricType::Histogram);
}

void AddGauge(prometheus::MetricFamily& family, const MetricLabels& labels, double value) {
  prometheus::ClientMetric metric = Sample(labels);
  metric.gauge.value = value;
  family.metric.push_back(std::move(metric));
}

void AddCounter(prometheus::MetricFamily& family, const MetricLabels& labels, double value) {
  prometheus::ClientMetric metric = Sample(labels);
  metric.counter.value = value;
  family.metric.push_back(std::move(metric));
}

FixedHistogram::FixedHistogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void FixedHistogram::Observe(double value) {
  size_t i = 0;
  while (i < upper_bounds_.size() && value > upper_bounds_[i]) ++i;
  ++counts_[i];
  ++count_;
  sum_ += value;
}

void FixedHistogram::AddTo(prometheus::MetricFamily& family, const MetricLabels& labels) const {
  prometheus::ClientMetric metric = Sample(labels);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    cumulative += counts_[i];
    const double bound =
        i < upper_bounds_.size() ? upper_bounds_[i] : std::numeric_limits<double>::infinity();
    metric.histogram.bucket.push_back({cumulative, bound});
  }
  metric.histogram.sample_count = count_;
  metric.histogram.sample_sum = sum_;
  family.metric.push_back(std::move(metric));
}

}  // namespace ringtrain
