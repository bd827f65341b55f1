#include "client/plot.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/exit_codes.h"
#include "client/job_format.h"
#include "client/job_steps.h"
#include "client/validation_view.h"

namespace ringtrain {

absl::StatusOr<PlotSeries> FetchPlotSeries(CoordinatorClient& client, const std::string& job_id,
                                           int64_t from_step, const std::string& title,
                                           std::chrono::milliseconds idle_timeout) {
  absl::StatusOr<JobSteps> fetched = FetchJobSteps(client, job_id, from_step, idle_timeout);
  if (!fetched.ok()) return fetched.status();
  const v1::Job& job = fetched->job;
  if (job.state() == v1::JOB_STATE_FAILED && fetched->steps.empty()) {
    // An empty plot would read as "no steps yet", as if the job were still to start.
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " FAILED before its first step, so there is nothing to plot: ",
                     job.error().message().empty() ? "(no message)" : job.error().message(),
                     " (`ringctl get ", job_id, "` shows the error)"));
  }
  PlotSeries series;
  series.title = !title.empty()
                     ? title
                     : (job.name().empty() ? job_id : absl::StrCat(job_id, " (", job.name(), ")"));
  series.subtitle = JobStateName(job.state());
  for (const v1::StepEvent& s : fetched->steps) {
    series.points.push_back(PlotPoint{s.step(), s.loss(), s.lr()});
  }
  for (const ValidationPoint& v : ValidationPoints(fetched->steps)) {
    series.validation.push_back(PlotPoint{v.step, v.loss, 0});
  }
  if (!series.points.empty()) {
    absl::StrAppend(&series.subtitle, ", steps ", series.points.front().step, "–",
                    series.points.back().step);
    if (job.total_steps() > 0) absl::StrAppend(&series.subtitle, " of ", job.total_steps());
    absl::StrAppend(&series.subtitle, ", last loss ", PlotValueText(series.points.back().loss));
  }
  if (!series.validation.empty()) {
    absl::StrAppend(&series.subtitle, ", last validation loss ",
                    PlotValueText(series.validation.back().loss));
  }
  return series;
}

CLI::App* AddPlotCommand(CLI::App& app, PlotFlags* flags) {
  CLI::App* plot = app.add_subcommand(
      "plot",
      "Write a job's loss curve (and learning rate, second axis) as a standalone SVG: the steps "
      "so far for a running job, all of them for a finished one. With several JOBs, their loss "
      "curves (and, dashed, validation losses) in one plot, one colour each, with a legend.");
  plot->add_option("JOB", flags->job_ids,
                   "The job id; several ids overlay their losses in one plot with a legend")
      ->required();
  plot->add_option("--out", flags->out, "The SVG file to write")->required();
  plot->add_option("--from-step", flags->from_step, "First step to plot (0: the whole history)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  plot->add_option("--title", flags->title,
                   "The plot's title (default: JOB (NAME); for several jobs \"JOB_A vs JOB_B\")");
  plot->footer(
      "Examples:\n"
      "  ringctl plot job-000001 --out loss.svg\n"
      "  ringctl plot job-000001 job-000002 --out cp1-vs-cp4.svg --title \"cp 1 vs cp 4\"");
  return plot;
}

int RunPlot(const PlotFlags& flags) {
  CoordinatorClient client(flags.coordinator);
  std::vector<PlotSeries> series;
  size_t steps = 0;
  const bool overlay = flags.job_ids.size() > 1;
  for (const std::string& job_id : flags.job_ids) {
    absl::StatusOr<PlotSeries> one =
        FetchPlotSeries(client, job_id, flags.from_step, overlay ? "" : flags.title);
    if (!one.ok()) {
      std::cerr << CommandErrorLine("plot", one.status(), job_id) << std::endl;
      return ExitCodeFor(one.status());
    }
    steps += one->points.size();
    series.push_back(*std::move(one));
  }
  const std::string svg =
      overlay
          ? RenderOverlaySvg(
                flags.title.empty() ? absl::StrJoin(flags.job_ids, " vs ") : flags.title, series)
          : RenderLossSvg(series.front());
  const std::string temporary = flags.out + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << svg;
    out.close();
    if (!out || std::rename(temporary.c_str(), flags.out.c_str()) != 0) {
      std::remove(temporary.c_str());
      std::cerr << "ringctl plot: cannot write --out " << flags.out
                << ": check that its folder exists and is writable" << std::endl;
      return kExitUsage;
    }
  }
  std::cout << "wrote " << flags.out << " (" << steps << " step" << (steps == 1 ? "" : "s");
  if (overlay) std::cout << " of " << series.size() << " jobs";
  std::cout << ")" << std::endl;
  return kExitOk;
}

}  // namespace ringtrain
