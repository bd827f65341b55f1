// `ringctl plot JOB [JOB...] --out FILE.svg`: FetchPlotSeries reads a job's points from the
// coordinator's WatchJob history (client/job_steps.h), RenderLossSvg (one job: loss and learning
// rate) or RenderOverlaySvg (several: their losses, one colour each, their validation losses
// dashed, a legend) from client/plot_svg.h draws them, RunPlot writes the file.
#ifndef RINGTRAIN_CLIENT_PLOT_H_
#define RINGTRAIN_CLIENT_PLOT_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/command.h"
#include "client/coordinator_client.h"
#include "client/plot_svg.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

// A job's steps from the coordinator, as of now (FetchJobSteps: the whole history of a finished
// job, the steps so far of a running one). Titles the series "JOB (NAME)" unless `title` is
// non-empty; the subtitle is the state, the steps and the last loss. Errors are FetchJobSteps',
// and FAILED_PRECONDITION (exit 1) for a job that FAILED before its first step, with its error.
absl::StatusOr<PlotSeries> FetchPlotSeries(
    CoordinatorClient& client, const std::string& job_id, int64_t from_step,
    const std::string& title, std::chrono::milliseconds idle_timeout = std::chrono::seconds(30));

struct PlotFlags : CommonFlags {
  std::vector<std::string> job_ids;  // one: loss and lr; several: their losses overlaid
  std::string out;                   // the SVG file to write
  int64_t from_step = 0;
  std::string title;  // empty: "JOB (NAME)", or for several jobs "JOB_A vs JOB_B ..."
};

// Adds the `plot` subcommand to `app`; parsing fills `*flags`, which must outlive `app`.
CLI::App* AddPlotCommand(CLI::App& app, PlotFlags* flags);

// Fetches, renders, writes --out (through a temporary file renamed into place, so a reader never
// sees half a file) and prints "wrote FILE (N steps)". Exit statuses are client/exit_codes.h's:
// 1 for an unknown job, 2 when --out cannot be written, 3 when the coordinator cannot be reached or
// stops sending.
int RunPlot(const PlotFlags& flags);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_PLOT_H_
