// AgentMetrics (worker/agent/agent_metrics.h): the agent's reading of its rank's entry in the
// trainer's step records, here the per-rank peaks, from records as the trainer writes them.
#include "worker/agent/agent_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace ringtrain {
namespace {

// The gauge `name` of the Collect()ed families; NaN when absent.
double Gauge(const AgentMetrics& metrics, const std::string& name) {
  for (const prometheus::MetricFamily& family : metrics.Collect()) {
    if (family.name != name) continue;
    if (family.metric.size() != 1) return -1;
    return family.metric[0].gauge.value;
  }
  return std::nan("");
}

constexpr char kCudaRecord[] =
    R"({"step": 1, "loss": 6.5, "device_memory_peak_bytes": 65712324608, "ranks": [)"
    R"({"rank": 0, "peak_memory_bytes": 154193920, "device_memory_peak_bytes": 65712324608},)"
    R"({"rank": 1, "peak_memory_bytes": 153919488, "device_memory_peak_bytes": 65198120960}]})";

TEST(AgentMetricsTest, ExportsItsRanksDevicePeak) {
  AgentMetrics metrics;
  metrics.TrainerStarted("job-000001", /*rank=*/1, /*world_size=*/2);
  metrics.TrainerRecord(kCudaRecord);
  EXPECT_EQ(Gauge(metrics, "ringtrain_trainer_device_memory_peak_bytes"), 65198120960.0);
  EXPECT_EQ(Gauge(metrics, "ringtrain_trainer_peak_memory_bytes"), 153919488.0);
}

TEST(AgentMetricsTest, OlderTrainersWithoutADevicePeakLeaveItZero) {
  AgentMetrics metrics;
  metrics.TrainerStarted("job-000001", 1, 2);
  metrics.TrainerRecord(kCudaRecord);
  // A new job on a trainer that does not write the field: its series start at 0 and stay there.
  metrics.TrainerStarted("job-000002", 0, 1);
  metrics.TrainerRecord(
      R"({"step": 1, "loss": 6.5, "ranks": [{"rank": 0, "peak_memory_bytes": 1048576}]})");
  EXPECT_EQ(Gauge(metrics, "ringtrain_trainer_device_memory_peak_bytes"), 0.0);
  EXPECT_EQ(Gauge(metrics, "ringtrain_trainer_peak_memory_bytes"), 1048576.0);
  // A value of the wrong type is skipped, not taken as 0 or NaN.
  metrics.TrainerRecord(R"({"step": 2, "ranks": [{"rank": 0, "device_memory_peak_bytes": 4096}]})");
  metrics.TrainerRecord(R"({"step": 3, "ranks": [{"rank": 0, "device_memory_peak_bytes": "x"}]})");
  EXPECT_EQ(Gauge(metrics, "ringtrain_trainer_device_memory_peak_bytes"), 4096.0);
}

TEST(AgentMetricsTest, ExportsTheStepsAttentionImbalance) {
  AgentMetrics metrics;
  metrics.TrainerStarted("job-000003", 0, 2);
  EXPECT_EQ(Gauge(metrics, "ringtrain_trainer_attention_imbalance"), 0.0);
  metrics.TrainerRecord(
      R"({"step": 1, "loss": 6.5, "attention_imbalance": 1.0625, "ranks": [{"rank": 0}, {"rank": 1}]})");
  EXPECT_EQ(Gauge(metrics, "ringtrain_trainer_attention_imbalance"), 1.0625);
}

TEST(AgentMetricsTest, LinesThatAreNotWholeStepRecordsChangeNothing) {
  AgentMetrics metrics;
  metrics.TrainerStarted("job-000001", 0, 1);
  metrics.TrainerRecord(
      R"({"step": 1, "loss": 6.5, "ranks": [{"rank": 0, "peak_memory_bytes": 1048576}]})");
  for (const char* line : {
           "",                                          // not JSON
           R"({"step": 2, "loss": 1.5)",                // torn mid-write
           R"([{"step": 2, "loss": 1.5}])",             // not an object
           R"({"loss": 1.5, "validation_loss": 1.5})",  // not a step (an eval's)
           R"({"step": "2", "loss": 1.5})",             // a step that is no integer
           R"({"step": 2.5, "loss": 1.5})",
           R"({"step": 2, "loss": 1.5, "ranks": {"rank": 0}})",  // ranks not an array
           R"({"step": 2, "loss": 1.5, "ranks": [0]})",          // a rank entry not an object
       }) {
    metrics.TrainerRecord(line);
    EXPECT_EQ(Gauge(metrics, "ringtrain_trainer_step"), 1.0) << line;
    EXPECT_EQ(Gauge(metrics, "ringtrain_trainer_loss"), 6.5) << line;
    EXPECT_EQ(Gauge(metrics, "ringtrain_trainer_peak_memory_bytes"), 1048576.0) << line;
  }
}

}  // namespace
}  // namespace ringtrain
