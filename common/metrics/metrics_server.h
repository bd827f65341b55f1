// Prometheus exposition for the torch-free processes (coordinator, agent): an HTTP /metrics
// endpoint (prometheus-cpp's Exposer) and helpers to build metric families at scrape time.
// Metrics are computed when scraped (Collectable::Collect) from the process's own state, so there
// is no second copy of that state to keep in sync.
#ifndef RINGTRAIN_COMMON_METRICS_METRICS_SERVER_H_
#define RINGTRAIN_COMMON_METRICS_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include "absl/status/statusor.h"

namespace ringtrain {

class MetricsServer {
 public:
  // Serves http://HOST:PORT/metrics. With scan > 1 a busy PORT is not an error: PORT+1, … up to
  // PORT+scan-1 are tried in turn (so several agents on one machine find distinct ports by
  // default). Errors: INVALID_ARGUMENT for an address that is not HOST:PORT, UNAVAILABLE when no
  // port could be bound (names them).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address,
                                                              int scan = 1);

  // `collectable` is read on every scrape (from the server's threads) for as long as it lives.
  void Register(const std::weak_ptr<prometheus::Collectable>& collectable);
  const std::string& address() const { return address_; }  // HOST:PORT actually bound

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, std::string address)
      : exposer_(std::move(exposer)), address_(std::move(address)) {}

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
};

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Appends one sample to `family` (whose type must match): the helpers keep Collect() readable.
void AddGauge(prometheus::MetricFamily& family, const MetricLabels& labels, double value);
void AddCounter(prometheus::MetricFamily& family, const MetricLabels& labels, double value);
prometheus::MetricFamily GaugeFamily(const std::string& name, const std::string& help);
prometheus::MetricFamily CounterFamily(const std::string& name, const std::string& help);

// A histogram with fixed bucket upper bounds, filled by Observe and exported by AddTo.
// Not thread-safe: guard it with the owner's lock.
class FixedHistogram {
 public:
  explicit FixedHistogram(std::vector<double> upper_bounds);
  void Observe(double value);
  void AddTo(prometheus::MetricFamily& family, const MetricLabels& labels) const;

 private:
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  uint64_t count_ = 0;
  double sum_ = 0;
};
prometheus::MetricFamily HistogramFamily(const std::string& name, const std::string& help);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_METRICS_METRICS_SERVER_H_
