#include "client/plot_svg.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/printable.h"

namespace ringtrain {
namespace {

// The canvas, in SVG user units (= CSS pixels). The plot area is [kLeft, kRight] × [kTop, kBottom];
// y grows downwards.
constexpr double kWidth = 900, kHeight = 500;
constexpr double kLeft = 80, kRight = kWidth - 90, kTop = 84, kBottom = kHeight - 56;
constexpr char kLossColor[] = "#1f77b4", kLrColor[] = "#ff7f0e", kNanColor[] = "#d62728";
constexpr char kValidationColor[] = "#2ca02c";
constexpr char kGridColor[] = "#e5e5e5", kAxisColor[] = "#333333";
// One colour per job of an overlay, in order (matplotlib's tab10), repeating after ten.
constexpr const char* kSeriesColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// 1, 2, 5 or 10 × 10^k near x > 0: the nearest when `round`, else the smallest not below x.
double NiceNumber(double x, bool round) {
  const double power = std::pow(10.0, std::floor(std::log10(x)));
  const double f = x / power;
  if (round) return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * power;
  constexpr double kSlack = 1e-9;  // 2.0000000000000002 (from 2.1 - 1.9) counts as 2
  return (f <= 1 + kSlack ? 1 : f <= 2 + kSlack ? 2 : f <= 5 + kSlack ? 5 : 10) * power;
}

std::string Num(double v) { return absl::StrFormat("%.2f", v); }

// The overlay's legend sits under the plot, as wide as the picture, each entry wrapped onto as many
// lines as it needs, and the picture grows to hold it: no label is cut at an edge. Widths are
// estimated (no fonts here) from PlotTextUnits at kPlotGlyphEm of the font size per unit.
constexpr double kLegendFont = 11, kLegendLine = 14, kLegendTextX = kLeft + 28;
constexpr double kLegendRightMargin = 16;

// Splits `text` into lines of at most `max_units` PlotTextUnits, at spaces where it can, inside a
// word (between characters, never inside one) where a word alone is too long.
std::vector<std::string> WrapText(absl::string_view text, double max_units) {
  std::vector<std::string> lines;
  std::string line;
  double line_units = 0;
  size_t last_space = std::string::npos;  // in `line`
  for (size_t i = 0; i < text.size();) {
    const auto [cp, length] = DecodeUtf8(text, i);
    const size_t n = length == 0 ? 1 : length;
    const double units = PlotTextUnits(text.substr(i, n));
    if (line_units + units > max_units && !line.empty()) {
      if (cp == ' ') {  // the break itself: the space is dropped
        lines.push_back(line);
        line.clear();
        line_units = 0;
        last_space = std::string::npos;
        i += n;
        continue;
      }
      std::string rest;
      if (last_space != std::string::npos) {  // carry the last word over
        rest = line.substr(last_space + 1);
        line.resize(last_space);
      }
      lines.push_back(line);
      line = rest;
      line_units = PlotTextUnits(line);
      last_space = std::string::npos;
    }
    if (cp == ' ') last_space = line.size();
    absl::StrAppend(&line, text.substr(i, n));
    line_units += units;
    i += n;
  }
  if (!line.empty() || lines.empty()) lines.push_back(line);
  return lines;
}

// A linear map from a Ticks range onto [to_lo, to_hi] (pixels; to_hi < to_lo for y axes).
struct Scale {
  Ticks ticks;
  double to_lo, to_hi;
  double operator()(double v) const {
    // Halves: last - first may not fit in a double when the values are near ±DBL_MAX.
    return to_lo + (v / 2 - ticks.first / 2) / (ticks.last / 2 - ticks.first / 2) * (to_hi - to_lo);
  }
};

// The [min, max] of the finite values of `field` over `points`; {0, 1} when there are none.
template <typename Field>
std::pair<double, double> FiniteRange(const std::vector<PlotPoint>& points, Field field) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const PlotPoint& p : points) {
    const double v = field(p);
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (lo > hi) return {0, 1};
  return {lo, hi};
}

// One <polyline> per maximal run of finite values of `field`.
template <typename Field>
std::string Polylines(const std::vector<PlotPoint>& points, Field field, const Scale& x,
                      const Scale& y, absl::string_view attributes) {
  std::string out, run;
  auto flush = [&] {
    if (!run.empty()) absl::StrAppend(&out, "<polyline ", attributes, " points=\"", run, "\"/>\n");
    run.clear();
  };
  for (const PlotPoint& p : points) {
    const double v = field(p);
    if (!std::isfinite(v)) {
      flush();
      continue;
    }
    absl::StrAppend(&run, run.empty() ? "" : " ", Num(x(p.step)), ",", Num(y(v)));
  }
  flush();
  return out;
}

std::string Text(double x, double y, absl::string_view anchor, absl::string_view text,
                 absl::string_view extra = "") {
  return absl::StrCat("<text x=\"", Num(x), "\" y=\"", Num(y), "\" text-anchor=\"", anchor, "\"",
                      extra.empty() ? "" : " ", extra, ">", XmlEscape(text), "</text>\n");
}

std::string Line(double x1, double y1, double x2, double y2, absl::string_view stroke,
                 absl::string_view extra = "") {
  return absl::StrCat("<line x1=\"", Num(x1), "\" y1=\"", Num(y1), "\" x2=\"", Num(x2), "\" y2=\"",
                      Num(y2), "\" stroke=\"", stroke, "\"", extra.empty() ? "" : " ", extra,
                      "/>\n");
}

// The axes with their ticks, labels and the loss grid; the right (learning rate) one when `lr` is
// given.
std::string Axes(const Scale& x, const Scale& loss, const Scale* lr) {
  std::string out = "<g class=\"grid\" stroke-width=\"1\">\n";
  for (double v : x.ticks.values)
    absl::StrAppend(&out, Line(x(v), kTop, x(v), kBottom, kGridColor));
  for (double v : loss.ticks.values) {
    absl::StrAppend(&out, Line(kLeft, loss(v), kRight, loss(v), kGridColor));
  }
  absl::StrAppend(&out, "</g>\n<g class=\"axes\" font-size=\"11\" fill=\"", kAxisColor, "\">\n");
  absl::StrAppend(&out, "<rect x=\"", Num(kLeft), "\" y=\"", Num(kTop), "\" width=\"",
                  Num(kRight - kLeft), "\" height=\"", Num(kBottom - kTop), "\" fill=\"none\" ",
                  "stroke=\"", kAxisColor, "\"/>\n");
  for (double v : x.ticks.values) {
    absl::StrAppend(&out, Line(x(v), kBottom, x(v), kBottom + 5, kAxisColor),
                    Text(x(v), kBottom + 18, "middle", FormatTick(v, x.ticks.step)));
  }
  for (double v : loss.ticks.values) {
    absl::StrAppend(&out, Line(kLeft - 5, loss(v), kLeft, loss(v), kAxisColor),
                    Text(kLeft - 8, loss(v) + 4, "end", FormatTick(v, loss.ticks.step)));
  }
  if (lr != nullptr) {
    for (double v : lr->ticks.values) {
      absl::StrAppend(&out, Line(kRight, (*lr)(v), kRight + 5, (*lr)(v), kAxisColor),
                      Text(kRight + 8, (*lr)(v) + 4, "start", FormatTick(v, lr->ticks.step)));
    }
  }
  const double mid_y = (kTop + kBottom) / 2;
  absl::StrAppend(
      &out, Text((kLeft + kRight) / 2, kHeight - 16, "middle", "step", "font-size=\"12\""),
      Text(20, mid_y, "middle", "loss",
           absl::StrCat("font-size=\"12\" transform=\"rotate(-90 20 ", Num(mid_y), ")\"")));
  if (lr != nullptr) {
    absl::StrAppend(&out, Text(kWidth - 14, mid_y, "middle", "learning rate",
                               absl::StrCat("font-size=\"12\" transform=\"rotate(90 ",
                                            Num(kWidth - 14), " ", Num(mid_y), ")\"")));
  }
  absl::StrAppend(&out, "</g>\n");
  return out;
}

// A red × centred on (x, y).
std::string Cross(double x, double y, double r) {
  return absl::StrCat("M", Num(x - r), " ", Num(y - r), "L", Num(x + r), " ", Num(y + r), "M",
                      Num(x - r), " ", Num(y + r), "L", Num(x + r), " ", Num(y - r));
}

std::string Legend(bool any_nan, bool validation) {
  const double y = 66;
  std::string out = "<g class=\"legend\" font-size=\"12\">\n";
  absl::StrAppend(&out, "<line x1=\"", Num(kLeft), "\" y1=\"", Num(y), "\" x2=\"", Num(kLeft + 24),
                  "\" y2=\"", Num(y), "\" stroke=\"", kLossColor, "\" stroke-width=\"2\"/>\n",
                  Text(kLeft + 30, y + 4, "start", "loss (left)"));
  absl::StrAppend(&out, "<line x1=\"", Num(kLeft + 130), "\" y1=\"", Num(y), "\" x2=\"",
                  Num(kLeft + 154), "\" y2=\"", Num(y), "\" stroke=\"", kLrColor,
                  "\" stroke-width=\"2\" stroke-dasharray=\"6 3\"/>\n",
                  Text(kLeft + 160, y + 4, "start", "learning rate (right)"));
  if (any_nan) {
    absl::StrAppend(&out, "<path d=\"", Cross(kLeft + 320, y, 4), "\" stroke=\"", kNanColor,
                    "\" stroke-width=\"2\"/>\n",
                    Text(kLeft + 330, y + 4, "start", "non-finite loss (NaN)"));
  }
  if (validation) {  // after the NaN entry, ending well inside the plot's width
    const double at = kLeft + (any_nan ? 490 : 320);
    absl::StrAppend(&out, "<rect x=\"", Num(at + 8), "\" y=\"", Num(y - 4),
                    "\" width=\"8\" height=\"8\" fill=\"", kValidationColor, "\"/>\n",
                    Text(at + 30, y + 4, "start", "validation loss (left)"));
  }
  absl::StrAppend(&out, "</g>\n");
  return out;
}

// The XML declaration, the <svg> element's start (`height` tall), a comment saying what the picture
// holds, the document title and the title and subtitle text on top.
std::string Header(absl::string_view comment, absl::string_view title, absl::string_view subtitle,
                   double height = kHeight) {
  std::string svg = absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"", kWidth, "\" height=\"",
      height, "\" viewBox=\"0 0 ", kWidth, " ", height, "\" font-family=\"sans-serif\">\n",
      "<!-- ringctl plot: ", comment, " -->\n", "<title>", XmlEscape(title), "</title>\n",
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      Text(kWidth / 2, 28, "middle", title, "font-size=\"18\" font-weight=\"bold\""));
  if (!subtitle.empty()) {
    absl::StrAppend(&svg,
                    Text(kWidth / 2, 47, "middle", subtitle, "font-size=\"12\" fill=\"#555555\""));
  }
  return svg;
}

// One element of class "loss-point" (plus `extra_class`) per point: a dot of `color`, or a red
// cross at the bottom of the plot for a non-finite loss. Each has a <title> "<label>step N loss X
// lr Y". Many thousands stay legible as a line, so the dots shrink as they crowd.
std::string Points(const std::vector<PlotPoint>& points, const Scale& x, const Scale& loss,
                   absl::string_view extra_class, absl::string_view color,
                   absl::string_view label) {
  const double radius = points.size() > 400 ? 1.2 : points.size() > 100 ? 2 : 3;
  const std::string classes =
      absl::StrCat("loss-point", extra_class.empty() ? "" : " ", extra_class);
  std::string out = absl::StrCat("<g class=\"loss-points\" fill=\"", color, "\">\n");
  for (const PlotPoint& p : points) {
    const std::string title =
        absl::StrCat("<title>", XmlEscape(label), "step ", p.step, " loss ", PlotValueText(p.loss),
                     " lr ", PlotValueText(p.lr), "</title>");
    if (std::isfinite(p.loss)) {
      absl::StrAppend(&out, "<circle class=\"", classes, "\" cx=\"", Num(x(p.step)), "\" cy=\"",
                      Num(loss(p.loss)), "\" r=\"", Num(radius), "\">", title, "</circle>\n");
    } else {  // at the bottom of the plot: the value has no place on the axis
      absl::StrAppend(&out, "<path class=\"", classes, " nan\" d=\"",
                      Cross(x(p.step), kBottom - 6, 4), "\" stroke=\"", kNanColor,
                      "\" stroke-width=\"2\">", title, "</path>\n");
    }
  }
  absl::StrAppend(&out, "</g>\n");
  return out;
}

// How a series of validation losses is drawn: the single-job plot's dotted green line, or an
// overlaid job's dashed line in its own colour.
struct ValidationStyle {
  absl::string_view extra_class;  // "" or "series-K", after "validation" / "validation-point"
  absl::string_view color;
  absl::string_view dasharray;
  absl::string_view label;  // before "step N" in the markers' titles: "" or "TITLE: "
};
constexpr ValidationStyle kSingleJobValidation = {"", kValidationColor, "2 2", ""};
constexpr char kOverlayValidationDash[] = "6 3";

// The validation losses: a line through square markers (finite values only).
std::string ValidationSeries(const std::vector<PlotPoint>& points, const Scale& x,
                             const Scale& loss, const ValidationStyle& style) {
  if (points.empty()) return "";
  const std::string space = style.extra_class.empty() ? "" : " ";
  std::string out = Polylines(
      points, [](const PlotPoint& p) { return p.loss; }, x, loss,
      absl::StrCat("class=\"validation", space, style.extra_class, "\" fill=\"none\" stroke=\"",
                   style.color, "\" stroke-width=\"1.5\" stroke-dasharray=\"", style.dasharray,
                   "\""));
  absl::StrAppend(&out, "<g class=\"validation-points\" fill=\"", style.color, "\">\n");
  for (const PlotPoint& p : points) {
    if (!std::isfinite(p.loss)) continue;
    absl::StrAppend(&out, "<rect class=\"validation-point", space, style.extra_class, "\" x=\"",
                    Num(x(p.step) - 4), "\" y=\"", Num(loss(p.loss) - 4),
                    "\" width=\"8\" height=\"8\"><title>", XmlEscape(style.label), "step ", p.step,
                    " validation loss ", PlotValueText(p.loss), "</title></rect>\n");
  }
  absl::StrAppend(&out, "</g>\n");
  return out;
}

}  // namespace

double PlotTextUnits(absl::string_view text) {
  double units = 0;
  for (size_t i = 0; i < text.size();) {
    const auto [cp, length] = DecodeUtf8(text, i);
    i += length == 0 ? 1 : length;
    // East Asian wide and fullwidth characters, and emoji: about twice a Latin letter.
    const bool wide = (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
                      (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
                      (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
                      (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1FAFF) ||
                      (cp >= 0x20000 && cp <= 0x3FFFD);
    units += wide ? 2 : 1;
  }
  return units;
}

std::string PlotValueText(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.6g", v);
}

Ticks NiceTicks(double lo, double hi, int target, bool integer_steps) {
  constexpr double kMax = std::numeric_limits<double>::max();
  target = std::max(target, 2);
  if (lo == hi) {  // one value: a range around it
    const double pad = std::max(lo == 0 ? 1 : std::abs(lo) * 0.05, integer_steps ? 1.0 : 0.0);
    lo = std::max(lo - pad, -kMax);
    hi = std::min(hi + pad, kMax);
  }
  Ticks ticks;
  // NaN when hi - lo overflows; caught below.
  ticks.step = NiceNumber(NiceNumber(hi - lo, false) / (target - 1), true);
  if (integer_steps) ticks.step = std::max(ticks.step, 1.0);
  ticks.first = std::floor(lo / ticks.step) * ticks.step;
  ticks.last = std::ceil(hi / ticks.step) * ticks.step;
  if (!std::isfinite(hi - lo) || !std::isfinite(ticks.step) || !(ticks.last > ticks.first) ||
      !std::isfinite(ticks.last - ticks.first)) {
    // Values near ±DBL_MAX, or a span below their precision: just the two ends.
    return Ticks{lo, hi, hi / 2 - lo / 2, {lo, hi}};
  }
  const int n = static_cast<int>(
      std::clamp(std::round((ticks.last - ticks.first) / ticks.step), 1.0, 4.0 * target));
  for (int i = 0; i <= n; ++i) ticks.values.push_back(ticks.first + i * ticks.step);
  ticks.last = ticks.values.back();
  return ticks;
}

std::string FormatTick(double value, double step) {
  value = std::round(value / step) * step;
  if (std::abs(value) < step * 1e-6) value = 0;  // never "-0" nor "1e-17"
  const double magnitude = std::floor(std::log10(step) + 1e-9);
  if (value == 0 || (std::abs(value) >= 1e-4 && std::abs(value) < 1e7 && magnitude >= -6)) {
    return absl::StrFormat("%.*f", static_cast<int>(std::max(0.0, -magnitude)), value);
  }
  const int digits = static_cast<int>(
      std::clamp(std::floor(std::log10(std::abs(value)) + 1e-9) - magnitude, 0.0, 16.0));
  return absl::StrFormat("%.*e", digits, value);
}

std::string XmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') break;
        out += c;
    }
  }
  return out;
}

std::string RenderLossSvg(const PlotSeries& series) {
  const std::vector<PlotPoint>& points = series.points;
  const auto loss_of = [](const PlotPoint& p) { return p.loss; };
  const auto lr_of = [](const PlotPoint& p) { return p.lr; };
  const double first_step = points.empty() ? 0 : points.front().step;
  const double last_step = points.empty() ? 1 : points.back().step;
  std::vector<PlotPoint> both = points;  // the loss axis covers the validation losses too
  both.insert(both.end(), series.validation.begin(), series.validation.end());
  const auto [loss_lo, loss_hi] = FiniteRange(both, loss_of);
  const auto [lr_lo, lr_hi] = FiniteRange(points, lr_of);
  const Scale x{NiceTicks(first_step, last_step, 10, /*integer_steps=*/true), kLeft, kRight};
  const Scale loss{NiceTicks(loss_lo, loss_hi, 6), kBottom, kTop};
  const Scale lr{NiceTicks(lr_lo, lr_hi, 6), kBottom, kTop};
  const bool any_nan = std::any_of(points.begin(), points.end(),
                                   [](const PlotPoint& p) { return !std::isfinite(p.loss); });

  std::string svg = Header(
      "loss (left axis) and learning rate (right axis) by step. Exactly one element with class "
      "\"loss-point\" per step (points == steps): a circle, or a red cross (class \"nan\") for a "
      "non-finite loss, which also breaks the loss line.",
      series.title, series.subtitle);
  absl::StrAppend(&svg, Legend(any_nan, !series.validation.empty()), Axes(x, loss, &lr));
  if (points.empty()) {
    absl::StrAppend(&svg, Text((kLeft + kRight) / 2, (kTop + kBottom) / 2, "middle", "no steps yet",
                               "font-size=\"16\" fill=\"#888888\""));
  }
  absl::StrAppend(&svg,
                  Polylines(points, lr_of, x, lr,
                            absl::StrCat("class=\"lr\" fill=\"none\" stroke=\"", kLrColor,
                                         "\" stroke-width=\"1.5\" stroke-dasharray=\"6 3\"")),
                  Polylines(points, loss_of, x, loss,
                            absl::StrCat("class=\"loss\" fill=\"none\" stroke=\"", kLossColor,
                                         "\" stroke-width=\"1.5\"")));

  absl::StrAppend(&svg, Points(points, x, loss, "", kLossColor, ""),
                  ValidationSeries(series.validation, x, loss, kSingleJobValidation), "</svg>\n");
  return svg;
}

std::string RenderOverlaySvg(const std::string& title, const std::vector<PlotSeries>& series) {
  std::vector<PlotPoint> all;  // for the axes' ranges: the losses and the validation losses
  for (const PlotSeries& one : series) {
    all.insert(all.end(), one.points.begin(), one.points.end());
    all.insert(all.end(), one.validation.begin(), one.validation.end());
  }
  const auto loss_of = [](const PlotPoint& p) { return p.loss; };
  double first_step = 0, last_step = 1;
  if (!all.empty()) {
    const auto [lo, hi] =
        std::minmax_element(all.begin(), all.end(),
                            [](const PlotPoint& a, const PlotPoint& b) { return a.step < b.step; });
    first_step = lo->step;
    last_step = hi->step;
  }
  const auto [loss_lo, loss_hi] = FiniteRange(all, loss_of);
  const Scale x{NiceTicks(first_step, last_step, 10, /*integer_steps=*/true), kLeft, kRight};
  const Scale loss{NiceTicks(loss_lo, loss_hi, 6), kBottom, kTop};

  // The legend's lines first: they set the picture's height. Each job's entry, then, for a job
  // that validated, one for its validation losses.
  const double max_units =
      (kWidth - kLegendRightMargin - kLegendTextX) / (kPlotGlyphEm * kLegendFont);
  struct LegendEntry {
    size_t k;
    bool validation;
    std::vector<std::string> lines;
  };
  std::vector<LegendEntry> entries;
  size_t legend_lines = 0;
  for (size_t k = 0; k < series.size(); ++k) {
    const PlotSeries& one = series[k];
    entries.push_back(
        {k, false,
         WrapText(one.subtitle.empty() ? one.title : absl::StrCat(one.title, " — ", one.subtitle),
                  max_units)});
    legend_lines += entries.back().lines.size();
    if (one.validation.empty()) continue;
    entries.push_back(
        {k, true, WrapText(absl::StrCat(one.title, " — validation loss"), max_units)});
    legend_lines += entries.back().lines.size();
  }
  const double legend_top = kHeight;
  const double height = legend_top + kLegendLine * legend_lines + 12;

  std::string svg = Header(
      "the loss of several jobs by step, one colour each (legend under the plot). Each job's "
      "polylines "
      "have the classes \"loss series-K\" (K = 0, 1, ... in the legend's order), and each of its "
      "steps is one element with classes \"loss-point series-K\" (\"nan\" too for a non-finite "
      "loss); its validation losses, dashed, are polylines \"validation series-K\" and one "
      "\"validation-point series-K\" per finite value.",
      title, absl::StrCat(series.size(), " job", series.size() == 1 ? "" : "s", ", loss by step"),
      height);
  absl::StrAppend(&svg, Axes(x, loss, nullptr));
  if (all.empty()) {
    absl::StrAppend(&svg, Text((kLeft + kRight) / 2, (kTop + kBottom) / 2, "middle", "no steps yet",
                               "font-size=\"16\" fill=\"#888888\""));
  }
  constexpr size_t kColors = sizeof(kSeriesColors) / sizeof(kSeriesColors[0]);
  for (size_t k = 0; k < series.size(); ++k) {
    const std::string cls = absl::StrCat("series-", k);
    absl::StrAppend(&svg,
                    Polylines(series[k].points, loss_of, x, loss,
                              absl::StrCat("class=\"loss ", cls, "\" fill=\"none\" stroke=\"",
                                           kSeriesColors[k % kColors], "\" stroke-width=\"1.5\"")),
                    Points(series[k].points, x, loss, cls, kSeriesColors[k % kColors],
                           absl::StrCat(series[k].title, ": ")));
    const std::string label = absl::StrCat(series[k].title, ": ");
    absl::StrAppend(
        &svg, ValidationSeries(series[k].validation, x, loss,
                               {cls, kSeriesColors[k % kColors], kOverlayValidationDash, label}));
  }
  // The legend under the plot: a swatch and "title — subtitle" per job (a dashed one and "title —
  // validation loss" for its validation losses), wrapped (one <text> each, a <tspan> per line when
  // it wraps).
  absl::StrAppend(&svg, "<g class=\"legend\" font-size=\"", Num(kLegendFont), "\">\n");
  double y = legend_top + kLegendLine;
  for (const LegendEntry& e : entries) {
    const char* color = kSeriesColors[e.k % kColors];
    absl::StrAppend(&svg,
                    Line(kLeft, y - 4, kLeft + 22, y - 4, color,
                         e.validation ? absl::StrCat("stroke-width=\"1.5\" stroke-dasharray=\"",
                                                     kOverlayValidationDash, "\"")
                                      : ""));
    const std::string cls = absl::StrCat("class=\"legend-entry ", e.validation ? "validation " : "",
                                         "series-", e.k, "\"");
    if (e.lines.size() == 1) {
      absl::StrAppend(&svg, Text(kLegendTextX, y, "start", e.lines[0], cls));
    } else {
      absl::StrAppend(&svg, "<text x=\"", Num(kLegendTextX), "\" y=\"", Num(y),
                      "\" text-anchor=\"start\" ", cls, ">");
      for (size_t i = 0; i < e.lines.size(); ++i) {
        absl::StrAppend(&svg, "<tspan x=\"", Num(kLegendTextX), "\" y=\"", Num(y + kLegendLine * i),
                        "\">", XmlEscape(e.lines[i]), "</tspan>");
      }
      absl::StrAppend(&svg, "</text>\n");
    }
    y += kLegendLine * e.lines.size();
  }
  absl::StrAppend(&svg, "</g>\n</svg>\n");
  return svg;
}

}  // namespace ringtrain
