#include "client/job_format.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/checkpoint_format.h"
#include "common/printable.h"
#include "common/record/step_record.h"

namespace ringtrain {
namespace {

double Seconds(const google::protobuf::Timestamp& t) { return t.seconds() + t.nanos() * 1e-9; }
bool IsSet(const google::protobuf::Timestamp& t) { return t.seconds() != 0 || t.nanos() != 0; }

// Characters, not bytes: "×" and "→" are one column each.
size_t DisplayWidth(const std::string& text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; });
}

// The text of every top-level number (or null) of a JSON object, as written: nlohmann's SAX
// interface hands over each number's literal, which parsing into a double would lose.
class TopLevelNumbers : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::map<std::string, std::string> numbers;

  bool null() override { return Value("null"); }
  bool boolean(bool) override { return Value(""); }
  bool number_integer(number_integer_t v) override { return Value(std::to_string(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Value(std::to_string(v)); }
  bool number_float(number_float_t, const string_t& text) override { return Value(text); }
  bool string(string_t&) override { return Value(""); }
  bool binary(binary_t&) override { return Value(""); }
  bool start_object(std::size_t) override { return Open(); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(); }
  bool end_array() override { return Close(); }
  bool key(string_t& key) override {
    key_ = key;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool Value(const std::string& text) {
    if (depth_ == 1 && !text.empty()) numbers[key_] = text;
    return true;
  }
  bool Open() {
    ++depth_;
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }
  int depth_ = 0;
  std::string key_;
};

// Whether a failure is a rank's (the coordinator sets rank -1, no worker, for a job-level one, e.g.
// a coordinator restart).
bool NamesARank(const v1::JobError& error) {
  return error.rank() >= 0 && (!error.worker_id().empty() || error.exit_status() != 0);
}

// How the failed rank ended: refused by its agent (no trainer ran, so no status of one), or its
// exit status.
std::string RankEnding(const v1::JobError& error) {
  if (error.cause() == "rank_refused") return "was refused by its agent (no trainer started)";
  return absl::StrCat("exited with status ", error.exit_status());
}

// A double as the shortest JSON text that parses back to the same bits; null for NaN or infinity.
std::string JsonNumber(double value) { return nlohmann::json(value).dump(); }

}  // namespace

std::string JobStateName(v1::JobState state) {
  const std::string name = v1::JobState_Name(state);
  return std::string(absl::StripPrefix(name, "JOB_STATE_"));
}

std::string WorkerStateName(v1::WorkerState state) {
  const std::string name = v1::WorkerState_Name(state);
  return std::string(absl::StripPrefix(name, "WORKER_STATE_"));
}

bool IsTerminal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

std::string MeshSummary(const v1::Job& job) {
  return absl::StrCat("world ", job.world_size(), " = dp ", job.dp(), " × cp ", job.cp(), ", ",
                      job.device_kind().empty() ? "cpu" : EscapeForTerminal(job.device_kind()));
}

std::string CpPlace(int64_t rank, int cp) {
  return cp < 1 ? "-" : absl::StrCat(rank % cp, "/", cp);
}

std::string FormatDuration(double seconds) {
  const int64_t s = std::isfinite(seconds) && seconds > 0 ? static_cast<int64_t>(seconds + 0.5) : 0;
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

std::string FormatAge(const google::protobuf::Timestamp& then, double now) {
  if (!IsSet(then)) return "-";
  const double age = std::max(0.0, now - Seconds(then));
  if (age < 120) return absl::StrCat(static_cast<int64_t>(age), "s");
  if (age < 2 * 3600) return absl::StrCat(static_cast<int64_t>(age / 60), "m");
  if (age < 2 * 86400) return absl::StrCat(static_cast<int64_t>(age / 3600), "h");
  return absl::StrCat(static_cast<int64_t>(age / 86400), "d");
}

std::string FormatClock(const google::protobuf::Timestamp& time) {
  if (!IsSet(time)) return "--:--:--";
  const time_t seconds = static_cast<time_t>(time.seconds());
  struct tm local {};
  localtime_r(&seconds, &local);
  char text[16];
  strftime(text, sizeof(text), "%H:%M:%S", &local);
  return text;
}

std::string FormatRfc3339(const google::protobuf::Timestamp& time) {
  return IsSet(time) ? google::protobuf::util::TimeUtil::ToString(time) : "";
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& raw_rows) {
  // Every cell is one line of text that may come from the server: escaped before it is measured.
  std::vector<std::vector<std::string>> rows;
  for (const auto& raw : raw_rows) {
    std::vector<std::string>& row = rows.emplace_back();
    for (const std::string& cell : raw) row.push_back(EscapeForTerminal(cell));
  }
  std::vector<size_t> widths(header.size(), 0);
  for (size_t c = 0; c < header.size(); ++c) widths[c] = DisplayWidth(header[c]);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < widths.size(); ++c) {
      widths[c] = std::max(widths[c], DisplayWidth(row[c]));
    }
  }
  std::string out;
  auto append_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size() && c < widths.size(); ++c) {
      absl::StrAppend(&line, row[c]);
      if (c + 1 < row.size()) line.append(widths[c] - DisplayWidth(row[c]) + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  };
  append_row(header);
  for (const auto& row : rows) append_row(row);
  return out;
}

std::string FormatJobTable(const std::vector<v1::Job>& jobs, double now) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::Job& job : jobs) {
    const std::string note = job.state() == v1::JOB_STATE_FAILED && job.has_error()
                                 ? job.error().message()
                                 : job.wait_reason();
    rows.push_back({job.job_id(), job.name(), JobStateName(job.state()),
                    absl::StrCat(job.dp(), "×", job.cp()),
                    absl::StrCat(job.last_step(), "/", job.total_steps()),
                    job.last_step() > 0 ? absl::StrFormat("%.4f", job.last_loss()) : "-",
                    FormatAge(job.submitted_time(), now), note});
  }
  return FormatTable({"ID", "NAME", "STATE", "MESH", "STEP", "LOSS", "AGE", "WAIT REASON / ERROR"},
                     rows);
}

std::string FormatJobError(const v1::Job& job) {
  if (job.state() == v1::JOB_STATE_CANCELLED) {
    return absl::StrCat(
        EscapeForTerminal(job.job_id()), " was cancelled",
        job.error().message().empty() ? "" : ": " + EscapeForTerminal(job.error().message(), true),
        "\n");
  }
  if (job.state() != v1::JOB_STATE_FAILED) return "";
  const v1::JobError& error = job.error();
  std::string out = absl::StrCat(
      EscapeForTerminal(job.job_id()), " failed: ",
      error.message().empty() ? "(no message)" : EscapeForTerminal(error.message(), true), "\n");
  if (NamesARank(error)) {
    absl::StrAppend(&out, "  rank ", error.rank(), " on worker ",
                    error.worker_id().empty() ? "?" : EscapeForTerminal(error.worker_id()), " ",
                    RankEnding(error), "\n");
  }
  if (!error.stderr_tail().empty()) {
    absl::StrAppend(&out, "  stderr tail:\n");
    for (absl::string_view line : absl::StrSplit(error.stderr_tail(), '\n', absl::SkipEmpty())) {
      absl::StrAppend(&out, "    ", EscapeForTerminal(line, true), "\n");
    }
  }
  return out;
}

std::string FormatJobDetail(const v1::Job& job, double now, const std::string& validation) {
  const bool named = !job.name().empty() && job.name() != job.job_id();
  std::string out =
      EscapeForTerminal(absl::StrCat(job.job_id(), named ? "  " + job.name() : "")) + "\n";
  // Values may come from the server as anything: escaped (multi-line messages keep their lines).
  auto field = [&out](absl::string_view name, const std::string& value) {
    absl::StrAppend(&out, absl::StrFormat("  %-12s ", name), EscapeForTerminal(value, true), "\n");
  };
  field("state", JobStateName(job.state()));
  field("mesh", MeshSummary(job));
  for (int i = 0; i < job.mesh_size(); ++i) {
    const v1::RankPlacement& p = job.mesh(i);
    field(i == 0 ? "ranks" : "", absl::StrCat("rank ", p.rank(), " → ", p.worker_id(), " (cp ",
                                              CpPlace(p.rank(), job.cp()), " of cp group ",
                                              p.cp_group(), ", dp index ", p.dp_index(), ")"));
  }
  if (!job.wait_reason().empty()) field("waiting", job.wait_reason());
  if (job.state() == v1::JOB_STATE_FAILED || !job.error().message().empty()) {
    const v1::JobError& error = job.error();
    field("error", NamesARank(error)
                       ? absl::StrCat(error.message(), " (rank ", error.rank(), " on ",
                                      error.worker_id().empty() ? "?" : error.worker_id(),
                                      error.cause() == "rank_refused"
                                          ? ", refused by its agent"
                                          : absl::StrCat(", exit status ", error.exit_status()),
                                      ")")
                       : error.message());
    bool first = true;
    for (absl::string_view line : absl::StrSplit(error.stderr_tail(), '\n', absl::SkipEmpty())) {
      field(first ? "stderr tail" : "", absl::StrCat("| ", line));
      first = false;
    }
  }
  if (job.max_restarts() > 0 || job.restart_count() > 0) {
    field("restarts", absl::StrCat(job.restart_count(), " of ", job.max_restarts()));
  }
  // Each failure, and how the job recovered from it (healed in place, or restarted from storage).
  for (int i = 0; i < job.failures_size(); ++i) {
    const v1::JobError& f = job.failures(i);
    std::string recovery;
    if (f.recovery() == "healed") {
      recovery =
          absl::StrCat(" -> healed in place: rank ", f.rank(), " on ", f.replacement_worker_id(),
                       f.recovery_seconds() > 0
                           ? absl::StrFormat(", training again in %.2f s", f.recovery_seconds())
                           : ", healing");
    } else if (f.recovery() == "restarted") {
      recovery = " -> restarted from storage";
    }
    field(i == 0 ? "failures" : "",
          absl::StrCat(i + 1, ". ", IsSet(f.time()) ? FormatClock(f.time()) + ", " : "",
                       "after step ", f.step(), f.cause().empty() ? "" : ", " + f.cause(), ": ",
                       f.message(), recovery));
  }
  if (job.mesh_overrides_size() > 0) {
    field("elastic", absl::StrCat(absl::StrJoin(job.mesh_overrides(), " "),
                                  " (a smaller mesh after workers were lost)"));
  }
  for (const auto& [name, time] : {std::pair{"submitted", &job.submitted_time()},
                                   {"started", &job.started_time()},
                                   {"finished", &job.finished_time()}}) {
    if (!IsSet(*time)) continue;
    field(name, absl::StrCat(FormatRfc3339(*time), " (", FormatAge(*time, now), " ago)"));
  }
  field("step",
        absl::StrCat(job.last_step(), "/", job.total_steps(),
                     job.last_step() > 0 ? absl::StrFormat(", loss %.4f", job.last_loss()) : ""));
  if (!validation.empty()) field("validation", validation);
  if (job.overrides_size() > 0) field("overrides", absl::StrJoin(job.overrides(), " "));
  if (job.has_load_from()) field("started from", LoadFromText(job));
  const std::vector<std::string> checkpoints = CheckpointLines(job);
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    field(i == 0 ? "checkpoints" : "", checkpoints[i]);
  }
  return out;
}

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  // Rounded as printed, so 1023.96 KiB shows as "1.0 MiB", not "1024.0 KiB".
  while (value >= 1023.95 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string WorkerDevice(const v1::Worker& worker) {
  const std::string& device = worker.device().empty() ? worker.device_kind() : worker.device();
  if (worker.device_name().empty()) return device;
  return absl::StrCat(device, " ", worker.device_name());
}

std::string FormatWorkerTable(const std::vector<v1::Worker>& workers, double now) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::Worker& w : workers) {
    const std::string job = w.job_id().empty() ? "-" : absl::StrCat(w.job_id(), "/", w.rank());
    const std::string age = FormatAge(w.last_heartbeat(), now);
    rows.push_back({w.worker_id(), WorkerDevice(w),
                    w.device_memory_bytes() > 0 ? FormatBytes(w.device_memory_bytes()) : "-",
                    w.host_label(), w.address(), WorkerStateName(w.state()), job,
                    age == "-" ? age : age + " ago"});
  }
  return FormatTable(
      {"ID", "DEVICE", "MEMORY", "HOST", "ADDRESS", "STATE", "JOB/RANK", "LAST HEARTBEAT"}, rows);
}

std::string MessageJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) return nlohmann::json({{"error", std::string(status.message())}}).dump();
  return json;
}

std::string MessageJsonArray(const std::vector<const google::protobuf::Message*>& messages) {
  std::vector<std::string> items;
  for (const google::protobuf::Message* m : messages) items.push_back(MessageJson(*m));
  return absl::StrCat("[", absl::StrJoin(items, ","), "]");
}

std::string StateChangeLine(const v1::StateChange& change) {
  // The first change of a job (from == to == QUEUED) is its submission: no arrow.
  const std::string states =
      change.from_state() == change.to_state()
          ? JobStateName(change.to_state())
          : absl::StrCat(JobStateName(change.from_state()), " → ", JobStateName(change.to_state()));
  return absl::StrCat(
      "[", FormatClock(change.time()), "] ", EscapeForTerminal(change.job_id()), " ", states,
      change.message().empty() ? "" : ": " + EscapeForTerminal(change.message(), true));
}

std::string StateChangeJson(const v1::StateChange& change) {
  nlohmann::ordered_json j;
  j["event"] = "state";
  j["job_id"] = change.job_id();
  j["from"] = JobStateName(change.from_state());
  j["to"] = JobStateName(change.to_state());
  j["message"] = change.message();
  j["time"] = FormatRfc3339(change.time());
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string StepEventJson(const v1::StepEvent& event) {
  // A raw line break in JSON can only be whitespace (strings escape theirs): flatten it, so that
  // each event stays one line.
  std::string record(absl::StripAsciiWhitespace(event.record_json()));
  std::replace_if(
      record.begin(), record.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  TopLevelNumbers numbers;
  const bool valid = !record.empty() && nlohmann::json::sax_parse(record, &numbers);
  auto number = [&](const std::string& key, double value) {
    const auto it = numbers.numbers.find(key);
    return valid && it != numbers.numbers.end() ? it->second : JsonNumber(value);
  };
  const uint64_t device_peak = DeviceMemoryPeakBytes(event);
  return absl::StrCat(
      "{\"event\":\"step\",\"job_id\":",
      nlohmann::json(event.job_id()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
      ",\"step\":", event.step(), ",\"loss\":", number("loss", event.loss()),
      ",\"grad_norm\":", number("grad_norm", event.grad_norm()),
      ",\"lr\":", number("lr", event.lr()),
      ",\"tokens_per_second\":", number("tokens_per_second", event.tokens_per_second()),
      ",\"step_seconds\":", number("step_seconds", event.step_seconds()),
      device_peak > 0 ? absl::StrCat(",\"device_memory_peak_bytes\":", device_peak) : "",
      numbers.numbers.count("validation_loss") > 0 && valid
          ? absl::StrCat(",\"validation_loss\":", numbers.numbers.at("validation_loss"))
          : "",
      numbers.numbers.count("mfu_percent") > 0 && valid
          ? absl::StrCat(",\"mfu_percent\":", numbers.numbers.at("mfu_percent"))
          : "",
      ",\"record\":", valid ? record : "null", "}");
}

uint64_t DeviceMemoryPeakBytes(const v1::StepEvent& event) {
  const absl::StatusOr<std::optional<StepRecord>> record =
      ParseStepRecord(event.record_json(), MissingFigure::kZero);
  if (!record.ok() || !record->has_value()) return 0;
  const double peak = (*record)->device_memory_peak_bytes;
  return std::isfinite(peak) && peak > 0 ? static_cast<uint64_t>(peak) : 0;
}

std::optional<double> MfuPercentOf(const v1::StepEvent& event) {
  const absl::StatusOr<std::optional<StepRecord>> record =
      ParseStepRecord(event.record_json(), MissingFigure::kZero);
  if (!record.ok() || !record->has_value()) return std::nullopt;
  return (*record)->mfu_percent;
}

StragglerNote StragglerOf(const v1::StepEvent& event) {
  const absl::StatusOr<std::optional<StepRecord>> record =
      ParseStepRecord(event.record_json(), MissingFigure::kZero);
  if (!record.ok() || !record->has_value()) return {};
  const StepRecord& r = **record;
  if (!std::isfinite(r.straggler_ratio) || r.straggler_ratio <= 0 || r.straggler_rank < 0) {
    return {};
  }
  return {static_cast<int64_t>(r.straggler_rank), r.straggler_ratio};
}

std::string StragglerLine(int64_t step, const StragglerNote& now, const StragglerNote& before) {
  if (now.rank < 0) {
    return absl::StrCat("step ", step, ": rank ", before.rank, " is no longer a straggler");
  }
  return absl::StrFormat(
      "step %d: rank %d is a straggler: its compute took %.2fx the median of the other ranks'",
      step, now.rank, now.ratio);
}

std::string StragglerEventJson(const std::string& job_id, int64_t step, const StragglerNote& now) {
  nlohmann::json event = {{"event", "straggler"},
                          {"job_id", job_id},
                          {"step", step},
                          {"rank", now.rank},
                          {"ratio", now.ratio}};
  return event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ProgressLine(const Progress& p) {
  std::string line = absl::StrCat("step ", p.step);
  if (p.total_steps > 0) absl::StrAppend(&line, "/", p.total_steps);
  absl::StrAppendFormat(&line, "  loss %.4f  %.0f tok/s", p.loss, p.tokens_per_second);
  if (p.mfu_percent) absl::StrAppendFormat(&line, "  MFU %.1f%%", *p.mfu_percent);
  absl::StrAppend(&line, "  elapsed ", FormatDuration(p.mean_step_seconds * p.step));
  if (p.total_steps > 0) {
    const int64_t left = std::max<int64_t>(0, p.total_steps - p.step);
    absl::StrAppend(&line, "  ETA ", FormatDuration(p.mean_step_seconds * left));
  }
  if (p.device_memory_peak_bytes > 0) {
    absl::StrAppend(&line, "  device peak ", FormatBytes(p.device_memory_peak_bytes));
  }
  return line;
}

std::string CommandErrorLine(absl::string_view command, const absl::Status& status,
                             absl::string_view job_id) {
  std::string line = absl::StrCat("ringctl ", command, ": ");
  if (status.code() == absl::StatusCode::kNotFound && !job_id.empty()) {
    if (!absl::StrContains(status.message(), job_id)) {
      absl::StrAppend(&line, "no job ", job_id, ": ");
    }
    absl::StrAppend(&line, status.message(), "; `ringctl list` shows the jobs");
  } else {
    absl::StrAppend(&line, status.message());
  }
  // The message is the server's (or echoes what was sent): nothing in it reaches the terminal raw.
  return EscapeForTerminal(line, /*keep_newlines=*/true);
}

}  // namespace ringtrain
