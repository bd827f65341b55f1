// `ringctl plot JOB --out FILE.svg`: FetchPlotSeries reads a job's points from the coordinator's
// WatchJob history, RenderLossSvg (client/plot_svg.h) draws them, RunPlot writes the file.
#ifndef RINGTRAIN_CLIENT_PLOT_H_
#define RINGTRAIN_CLIENT_PLOT_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "client/coordinator_client.h"
#include "client/plot_svg.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ringtrain {

// A job's steps from the coordinator, as of now: GetJob (with a deadline) first; then WatchJob from
// `from_step`. For a finished job the stream is read to its end. For one that is not finished the
// read stops once it has delivered the job's last_step from that GetJob (the stream would go on
// live) and the stream is cancelled; with no steps yet no stream is opened. A step that appears
// twice (a job resumed from a checkpoint) keeps its latest value. Titles the series
// "JOB (NAME)" unless `title` is non-empty.
//
// Errors: GetJob's (NOT_FOUND for an unknown id, UNAVAILABLE "cannot reach coordinator at ...");
// the stream's; DEADLINE_EXCEEDED when no event arrives for `idle_timeout` before the read is
// complete.
absl::StatusOr<PlotSeries> FetchPlotSeries(
    CoordinatorClient& client, const std::string& job_id, int64_t from_step,
    const std::string& title, std::chrono::milliseconds idle_timeout = std::chrono::seconds(30));

struct PlotFlags {
  std::string coordinator;  // set by the caller to its default
  std::string job_id;
  std::string out;  // the SVG file to write
  int64_t from_step = 0;
  std::string title;  // empty: "JOB (NAME)"
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
