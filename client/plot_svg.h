// The drawing behind `ringctl plot` (client/plot.h): a job's loss curve, with the learning rate on
// a second axis, as one standalone SVG file (no scripts, fonts or stylesheets from elsewhere; no
// plotting library). A pure function of the points, so tests pin it without a coordinator.
#ifndef RINGTRAIN_CLIENT_PLOT_SVG_H_
#define RINGTRAIN_CLIENT_PLOT_SVG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ringtrain {

// One optimizer step as plotted. A non-finite loss or lr (NaN, which the trainer writes as JSON
// null, or ±inf) is a gap in its line; a non-finite loss is also marked.
struct PlotPoint {
  int64_t step = 0;  // 1-based
  double loss = 0;
  double lr = 0;
};

struct PlotSeries {
  std::string title;              // plain text (escaped when drawn), e.g. "job-000001 (tiny-cp4)"
  std::string subtitle;           // plain text, may be empty, e.g. "RUNNING, steps 1–37 of 100"
  std::vector<PlotPoint> points;  // ascending step, one per step
  // The steps that validated ([validation] enable), ascending: `loss` is the validation loss (lr
  // unused). RenderLossSvg draws them as a second series on the loss axis.
  std::vector<PlotPoint> validation;
};

// The SVG document (UTF-8, with an XML declaration). Layout: title and subtitle on top, a legend
// under them, the loss on the left axis, the learning rate on the right one, steps along the
// bottom; every axis has "nice" round ticks (1, 2 or 5 × 10^k apart) and a grid.
//
// The contract tests count on: exactly one element whose class list holds "loss-point" per entry
// of `points` (a <circle> for a finite loss, a red cross <path> with the additional class "nan"
// at the bottom of the plot for a non-finite one), each with a <title> "step N loss X lr Y". Each
// maximal run of finite losses is one <polyline class="loss">, each run of finite rates one
// <polyline class="lr">. Any input works: no points ("no steps yet"), one point, constant
// series, all-NaN series; text is XML-escaped. With `validation` points, the loss axis covers them
// too, each maximal run of finite ones is one <polyline class="validation">, each point one
// <rect class="validation-point"> with a <title> "step N validation loss X", and the legend names
// the series.
std::string RenderLossSvg(const PlotSeries& series);

// Several jobs' losses in one SVG (`ringctl plot JOB_A JOB_B ...`), on one loss axis (no learning
// rate), one colour each, with a legend naming each series (its title, then its subtitle) under
// the plot: each entry wrapped to the picture's width (a <tspan> per line when it wraps) and the
// picture as tall as the legend needs, so no text reaches past its width or height, taking a unit
// of PlotTextUnits as kPlotGlyphEm of the font size. The
// contract tests count on: each maximal run of finite losses of series K is one
// <polyline class="loss series-K">; each point of series K is one element whose class list holds
// "loss-point" and "series-K" (and "nan" for a non-finite loss); the legend is one
// <g class="legend"> with one <text class="legend-entry series-K"> per series. A series with
// `validation` points has them on the same loss axis, dashed in its colour: each maximal run of
// finite ones one <polyline class="validation series-K">, each finite one a
// <rect class="validation-point series-K"> titled "TITLE: step N validation loss X", and a legend
// entry of its own, <text class="legend-entry validation series-K"> ("TITLE — validation loss"),
// after the job's, wrapped and fitted like it. Any input works, as for RenderLossSvg; text is
// XML-escaped.
std::string RenderOverlaySvg(const std::string& title, const std::vector<PlotSeries>& series);

// Round tick values covering [lo, hi] (lo <= hi, both finite): `first` <= lo and `last` >= hi are
// ticks too, `step` is 1, 2 or 5 × 10^k, and there are about `target` of them (never more than
// 4 × target + 1). lo == hi gets a range around the value. With integer_steps, step >= 1. Where
// round ticks cannot be had (values near ±DBL_MAX, a span below their precision) the ticks are
// just lo and hi.
struct Ticks {
  double first = 0;
  double last = 1;
  double step = 1;
  std::vector<double> values;
};
Ticks NiceTicks(double lo, double hi, int target, bool integer_steps = false);

// A tick label: `value` rounded to a multiple of `step` and printed with no more digits than the
// step needs ("0.0003", "2.5", "40", "1e-05"); never "-0".
std::string FormatTick(double value, double step);

// `text` with &, <, >, " and ' replaced by entities, and characters XML 1.0 forbids (C0 controls
// other than tab/newline/CR) dropped.
std::string XmlEscape(absl::string_view text);

// The width of `text` in units of one Latin glyph: each character 1, East Asian wide characters and
// emoji 2. A unit is taken as at most kPlotGlyphEm of the font size, wider than any digit or
// letter of the sans-serif fonts renderers use (DejaVu Sans: digits 0.64 em, "W" 0.99 em but the
// average of a label far less), so estimated widths err long.
inline constexpr double kPlotGlyphEm = 0.7;
double PlotTextUnits(absl::string_view text);

// A loss or learning rate as the point titles (and the plot's subtitle) show it: %.6g, or "NaN",
// "inf", "-inf".
std::string PlotValueText(double v);

}  // namespace ringtrain

#endif  // RINGTRAIN_CLIENT_PLOT_SVG_H_
