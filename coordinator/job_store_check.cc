#include "coordinator/job_store_check.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/job.h"
#include "coordinator/sqlite_db.h"

namespace ringtrain {
namespace {

// A damaged store may lose thousands of rows: one line names the first few and counts the rest.
constexpr size_t kMaxNamed = 3;

using Range = std::pair<int64_t, int64_t>;  // first, last (inclusive)

// The numbers in 1..last that `present` (ascending, each once) lacks.
std::vector<Range> Missing(const std::vector<int64_t>& present, int64_t last) {
  std::vector<Range> missing;
  int64_t next = 1;
  for (int64_t n : present) {
    if (n > last) break;
    if (n > next) missing.push_back({next, n - 1});
    next = std::max(next, n + 1);
  }
  if (next <= last) missing.push_back({next, last});
  return missing;
}

// "job-000004, job-000007 to job-000009 and 12 more": the first kMaxNamed ranges, then a count.
std::string NameRanges(const std::vector<Range>& ranges,
                       const std::function<std::string(int64_t)>& name, const char* through) {
  std::vector<std::string> named;
  int64_t more = 0;
  for (const Range& r : ranges) {
    if (named.size() == kMaxNamed) {
      more += r.second - r.first + 1;
      continue;
    }
    named.push_back(r.first == r.second ? name(r.first)
                                        : absl::StrCat(name(r.first), through, name(r.second)));
  }
  if (more > 0) named.push_back(absl::StrCat(more, " more"));
  if (named.size() == 1) return named[0];
  const std::string last = named.back();
  named.pop_back();
  return absl::StrCat(absl::StrJoin(named, ", "), " and ", last);
}

std::string Count(int64_t n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

absl::StatusOr<std::vector<int64_t>> Column(Statement& s) {
  std::vector<int64_t> values;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return values;
    values.push_back(s.Int(0));
  }
}

// Job rows against the counter: the store took jobs 1..next_job_number - 1 and deletes none.
absl::StatusOr<std::string> FindLostJobs(SqliteDb& db, int64_t next_job_number) {
  const int64_t took = next_job_number - 1;
  Statement totals(db,
                   "SELECT COUNT(*), IFNULL(MIN(job_number), 1), IFNULL(MAX(job_number), 0) "
                   "FROM jobs");
  RT_ASSIGN_OR_RETURN(bool row, totals.Step());
  const int64_t held = row ? totals.Int(0) : 0;
  const int64_t lowest = row ? totals.Int(1) : 1;
  const int64_t highest = row ? totals.Int(2) : 0;
  if (held == took && lowest >= 1 && highest <= took) return std::string();  // all of 1..took
  if (highest > took) {
    return absl::StrCat("it holds ", JobIdForNumber(highest),
                        ", but its job counter says the next "
                        "job is ",
                        JobIdForNumber(next_job_number),
                        ": the counter went back, and taking it would hand out job ids again");
  }
  Statement numbers(db, "SELECT job_number FROM jobs WHERE job_number >= 1 ORDER BY job_number");
  RT_ASSIGN_OR_RETURN(std::vector<int64_t> present, Column(numbers));
  const std::vector<Range> missing = Missing(present, took);
  if (missing.empty()) {  // rows numbered below 1: not the store's own
    return absl::StrCat("it holds ", Count(held, "job", "jobs"), ", not the ", took,
                        " its job counter says it took");
  }
  int64_t lost = 0;
  for (const Range& r : missing) lost += r.second - r.first + 1;
  return absl::StrCat(
      "it lacks ", lost, " of the ", Count(took, "job", "jobs"),
      " its job counter says it took: ", NameRanges(missing, JobIdForNumber, " to "));
}

// One job whose step events disagree with what it took: what it lacks, e.g. "job-000003 holds 7
// of the 10 step events it took (steps 4-6 are missing)".
absl::StatusOr<std::string> DescribeLostSteps(SqliteDb& db, const std::string& job_id,
                                              int64_t last_step, int64_t took, int64_t held,
                                              int64_t highest) {
  Statement steps(db, "SELECT step FROM step_events WHERE job_id = ? ORDER BY step");
  steps.Bind(1, job_id);
  RT_ASSIGN_OR_RETURN(std::vector<int64_t> present, Column(steps));
  const std::vector<Range> missing = Missing(present, last_step);
  const std::string which =
      missing.empty()
          ? ""
          : absl::StrCat(
                " (",
                missing.size() == 1 && missing[0].first == missing[0].second ? "step " : "steps ",
                NameRanges(
                    missing, [](int64_t n) { return absl::StrCat(n); }, "-"),
                " of 1-", last_step, " missing)");
  if (held < took) {
    return absl::StrCat(job_id, " holds ", held, " of the ",
                        Count(took, "step event", "step events"), " it took", which);
  }
  if (highest < last_step) {
    return absl::StrCat(job_id, " holds step events up to step ", highest,
                        ", not up to its last "
                        "step ",
                        last_step, which);
  }
  return absl::StrCat(job_id, " holds ", Count(held, "step event", "step events"), " up to step ",
                      highest, ", but it took ", took, " up to step ", last_step);
}

// Step event rows against each job's count and last step: one pass over both tables.
absl::StatusOr<std::string> FindLostSteps(SqliteDb& db) {
  Statement jobs(db,
                 "SELECT j.job_id, j.last_step, j.step_event_count, COUNT(e.step), "
                 "IFNULL(MAX(e.step), 0) FROM jobs j "
                 "LEFT JOIN step_events e ON e.job_id = j.job_id GROUP BY j.job_number "
                 "HAVING COUNT(e.step) != j.step_event_count "
                 "OR IFNULL(MAX(e.step), 0) != j.last_step ORDER BY j.job_number");
  std::vector<std::string> named;
  int64_t jobs_lost = 0;
  while (true) {
    RT_ASSIGN_OR_RETURN(bool row, jobs.Step());
    if (!row) break;
    if (jobs_lost++ >= static_cast<int64_t>(kMaxNamed)) continue;
    RT_ASSIGN_OR_RETURN(std::string what, DescribeLostSteps(db, jobs.Text(0), jobs.Int(1),
                                                            jobs.Int(2), jobs.Int(3), jobs.Int(4)));
    named.push_back(std::move(what));
  }
  if (jobs_lost == 0) return std::string();
  std::string out = absl::StrCat(Count(jobs_lost, "job", "jobs"),
                                 " lost step events: ", absl::StrJoin(named, "; "));
  if (jobs_lost > static_cast<int64_t>(kMaxNamed)) {
    absl::StrAppend(&out, "; and ", Count(jobs_lost - kMaxNamed, "more job", "more jobs"));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> FindLostRecords(SqliteDb& db, int64_t next_job_number) {
  RT_ASSIGN_OR_RETURN(std::string jobs, FindLostJobs(db, next_job_number));
  if (!jobs.empty()) return jobs;
  return FindLostSteps(db);
}

}  // namespace ringtrain
