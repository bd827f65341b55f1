#include "client/plot.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/exit_codes.h"
#include "client/job_format.h"

namespace ringtrain {
namespace {

// Cancels a stream when no Touch() has come for `timeout`, so a read of history cannot hang on a
// silent coordinator (the WatchJob stream itself has no deadline). Thread-safe.
class IdleWatchdog {
 public:
  IdleWatchdog(JobEventStream* stream, absl::Duration timeout)
      : stream_(stream), timeout_(timeout), thread_([this] { Run(); }) {}
  ~IdleWatchdog() {
    {
      absl::MutexLock lock(&mu_);
      stopped_ = true;
    }
    thread_.join();
  }
  void Touch() {
    absl::MutexLock lock(&mu_);
    last_event_ = absl::Now();
  }
  bool fired() {
    absl::MutexLock lock(&mu_);
    return fired_;
  }

 private:
  void Run() {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithDeadline(absl::Condition(&stopped_), last_event_ + timeout_)) {
      if (absl::Now() < last_event_ + timeout_) continue;  // an event came meanwhile
      fired_ = true;
      stream_->Cancel();
      return;
    }
  }

  JobEventStream* const stream_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::Time last_event_ ABSL_GUARDED_BY(mu_) = absl::Now();
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is initialised
};

}  // namespace

absl::StatusOr<PlotSeries> FetchPlotSeries(CoordinatorClient& client, const std::string& job_id,
                                           int64_t from_step, const std::string& title,
                                           std::chrono::milliseconds idle_timeout) {
  const absl::StatusOr<v1::Job> job = client.GetJob(job_id);
  if (!job.ok()) return job.status();
  const bool finished = IsTerminal(job->state());
  const int64_t until = job->last_step();  // for an unfinished job: where "so far" ends
  const int64_t first = std::max<int64_t>(from_step, 1);

  std::map<int64_t, PlotPoint> by_step;  // a step replayed after a restart keeps its last value
  if (finished || until >= first) {
    std::unique_ptr<JobEventStream> stream = client.WatchJob(job_id, from_step);
    bool caught_up = false;
    bool idle = false;
    {
      IdleWatchdog watchdog(stream.get(), absl::FromChrono(idle_timeout));
      v1::JobEvent event;
      while (stream->Next(&event)) {
        watchdog.Touch();
        if (!event.has_step() || event.step().step() < first) continue;
        const v1::StepEvent& s = event.step();
        by_step[s.step()] = PlotPoint{s.step(), s.loss(), s.lr()};
        if (!finished && s.step() >= until) {
          caught_up = true;  // the rest would be live
          break;
        }
      }
      idle = watchdog.fired();
    }
    if (caught_up) stream->Cancel();
    const absl::Status status = stream->Finish();
    if (idle && !caught_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("no event from the coordinator at ", client.address(), " for ",
                       absl::FormatDuration(absl::FromChrono(idle_timeout)),
                       " while reading the steps of ", job_id, " (", by_step.size(),
                       " read, up to step ", by_step.empty() ? 0 : by_step.rbegin()->first, ")"));
    }
    if (!caught_up && !status.ok()) return status;
  }

  PlotSeries series;
  series.title =
      !title.empty()
          ? title
          : (job->name().empty() ? job_id : absl::StrCat(job_id, " (", job->name(), ")"));
  series.subtitle = JobStateName(job->state());
  for (const auto& [step, point] : by_step) series.points.push_back(point);
  if (!series.points.empty()) {
    absl::StrAppend(&series.subtitle, ", steps ", series.points.front().step, "–",
                    series.points.back().step);
    if (job->total_steps() > 0) absl::StrAppend(&series.subtitle, " of ", job->total_steps());
    absl::StrAppend(&series.subtitle, ", last loss ", PlotValueText(series.points.back().loss));
  }
  return series;
}

CLI::App* AddPlotCommand(CLI::App& app, PlotFlags* flags) {
  CLI::App* plot = app.add_subcommand(
      "plot",
      "Write a job's loss curve (and learning rate, second axis) as a standalone SVG: the steps "
      "so far for a running job, all of them for a finished one.");
  plot->add_option("JOB", flags->job_id, "The job id")->required();
  plot->add_option("--out", flags->out, "The SVG file to write")->required();
  plot->add_option("--coordinator", flags->coordinator, "The coordinator's address (host:port)")
      ->capture_default_str();
  plot->add_option("--from-step", flags->from_step, "First step to plot (0: the whole history)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  plot->add_option("--title", flags->title, "The plot's title (default: JOB (NAME))");
  return plot;
}

int RunPlot(const PlotFlags& flags) {
  CoordinatorClient client(flags.coordinator);
  const absl::StatusOr<PlotSeries> series =
      FetchPlotSeries(client, flags.job_id, flags.from_step, flags.title);
  if (!series.ok()) {
    std::cerr << CommandErrorLine("plot", series.status(), flags.job_id) << std::endl;
    return ExitCodeFor(series.status());
  }
  const std::string svg = RenderLossSvg(*series);
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
  std::cout << "wrote " << flags.out << " (" << series->points.size() << " step"
            << (series->points.size() == 1 ? "" : "s") << ")" << std::endl;
  return kExitOk;
}

}  // namespace ringtrain
