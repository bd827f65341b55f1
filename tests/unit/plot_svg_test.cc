// RenderLossSvg, NiceTicks and FormatTick (client/plot_svg.h) as pure functions; `ringctl plot` as
// a process is tests/integration/ringctl_plot_test.cc. Every SVG is written to a temporary file and
// checked with xmllint (Debian's libxml2-utils): well-formed, and one "loss-point" element per
// step, counted by XPath.
#include "client/plot_svg.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/svg_check.h"
#include "tests/integration/test_util.h"

namespace ringtrain::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// RenderLossSvg alone: the SVG of `series` written to DIR/name.svg, checked by xmllint; returns the
// text.
std::string Render(const TempDir& dir, const std::string& name, const PlotSeries& series) {
  const std::string svg = RenderLossSvg(series);
  WriteFile(dir / (name + ".svg"), svg);
  ExpectFiniteCoordinates(svg);
  return svg;
}

int Occurrences(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(RenderLossSvgTest, OneStep) {
  TempDir dir;
  const std::string svg = Render(dir, "one", {"one step", "", {{1, 5.0, 3e-4}}});
  EXPECT_EQ(CountPoints(dir / "one.svg"), 1);
  EXPECT_EQ(Occurrences(svg, "<polyline class=\"loss\""), 1);
  EXPECT_TRUE(Has(svg, "<title>step 1 loss 5 lr 0.0003</title>"));
}

TEST(RenderLossSvgTest, ConstantSeries) {
  TempDir dir;
  PlotSeries series{"constant", "", {}};
  for (int step = 1; step <= 10; ++step) series.points.push_back({step, 2.0, 1e-3});
  const std::string svg = Render(dir, "constant", series);
  EXPECT_EQ(CountPoints(dir / "constant.svg"), 10);
  // Ticks around the constant values, at them too: e.g. "2.00" and "0.00100".
  EXPECT_TRUE(std::regex_search(svg, std::regex(R"(>2\.0*</text>)"))) << svg;
  EXPECT_TRUE(std::regex_search(svg, std::regex(R"(>0\.0010*</text>)"))) << svg;
}

TEST(RenderLossSvgTest, ValidationIsASecondSeries) {
  TempDir dir;
  PlotSeries series{"validated", "", {}};
  for (int step = 1; step <= 10; ++step) series.points.push_back({step, 6.0 - 0.1 * step, 1e-3});
  series.validation = {{5, 5.9, 0}, {10, 1.5, 0}};  // below every training loss
  const std::string svg = Render(dir, "validated", series);
  EXPECT_EQ(CountPoints(dir / "validated.svg"), 10);  // still one loss-point per step
  EXPECT_EQ(Occurrences(svg, "class=\"validation-point\""), 2);
  EXPECT_EQ(Occurrences(svg, "<polyline class=\"validation\""), 1);
  EXPECT_TRUE(Has(svg, "<title>step 10 validation loss 1.5</title>"));
  EXPECT_TRUE(Has(svg, "validation loss (left)"));  // the legend names it
  // The loss axis reaches down to the validation loss: a tick "1" beside the step axis' "1".
  EXPECT_EQ(Occurrences(svg, ">1</text>"), 2) << svg;
  EXPECT_FALSE(Has(Render(dir, "plain", {"plain", "", series.points}), "validation"));
}

TEST(RenderLossSvgTest, NanLossesBreakTheLineAndAreMarked) {
  TempDir dir;
  PlotSeries series{"nan", "", {}};
  for (int step = 1; step <= 5; ++step) {
    series.points.push_back({step, step == 3 ? kNaN : 4.0 - step * 0.1, step == 4 ? kNaN : 1e-3});
  }
  const std::string svg = Render(dir, "nan", series);
  int nan = 0;
  EXPECT_EQ(CountPoints(dir / "nan.svg", &nan), 5);
  EXPECT_EQ(nan, 1);
  EXPECT_EQ(Occurrences(svg, "<polyline class=\"loss\""), 2);  // steps 1-2 and 4-5
  EXPECT_EQ(Occurrences(svg, "<polyline class=\"lr\""), 2);    // steps 1-3 and 5
  EXPECT_TRUE(Has(svg, "non-finite loss")) << "the legend names the marker";

  PlotSeries all_nan{"all nan", "", {{1, kNaN, kNaN}, {2, kNaN, kNaN}, {3, INFINITY, kNaN}}};
  const std::string none = Render(dir, "all_nan", all_nan);
  EXPECT_EQ(CountPoints(dir / "all_nan.svg", &nan), 3);
  EXPECT_EQ(nan, 3);
  EXPECT_EQ(Occurrences(none, "<polyline"), 0);
  EXPECT_TRUE(Has(none, "<title>step 3 loss inf lr NaN</title>"));
}

TEST(RenderLossSvgTest, EscapesText) {
  TempDir dir;
  const std::string svg =
      Render(dir, "escape", {"job-1 (a <&> \"b\" 'c'\x01)", "sub <&>", {{1, 1.0, 1.0}}});
  EXPECT_EQ(CountPoints(dir / "escape.svg"), 1);
  EXPECT_TRUE(Has(svg, ">job-1 (a &lt;&amp;&gt; &quot;b&quot; &apos;c&apos;)</text>"));
  EXPECT_TRUE(Has(svg, "<title>job-1 (a &lt;&amp;&gt; &quot;b&quot; &apos;c&apos;)</title>"));
  EXPECT_TRUE(Has(svg, ">sub &lt;&amp;&gt;</text>"));
  EXPECT_EQ(XmlEscape("a\tb\x1f"), "a\tb");
}

TEST(RenderLossSvgTest, NoPointsAndExtremeValues) {
  TempDir dir;
  const std::string empty = Render(dir, "empty", {"empty", "", {}});
  EXPECT_EQ(CountPoints(dir / "empty.svg"), 0);
  EXPECT_TRUE(Has(empty, "no steps yet"));
  Render(dir, "huge", {"huge", "", {{1, -1e308, 0}, {2, 1e308, 1e-300}, {1000000, 1e-300, 1e308}}});
  EXPECT_EQ(CountPoints(dir / "huge.svg"), 3);
}

TEST(RenderOverlaySvgTest, EachJobIsASeriesWithItsLegendEntry) {
  TempDir dir;
  PlotSeries a{"job-000001 (cp1)", "SUCCEEDED, steps 1–4", {}};
  PlotSeries b{"job-000002 (cp4)", "RUNNING, steps 1–3", {}};
  for (int step = 1; step <= 4; ++step) a.points.push_back({step, 5.0 - step, 1e-3});
  for (int step = 1; step <= 3; ++step)
    b.points.push_back({step, step == 2 ? kNaN : 5.5 - step, 1e-3});
  const std::string svg = RenderOverlaySvg("cp1 vs cp4 <&>", {a, b});
  WriteFile(dir / "overlay.svg", svg);
  ExpectFiniteCoordinates(svg);
  int nan = 0;
  EXPECT_EQ(CountPoints(dir / "overlay.svg", &nan), 7);
  EXPECT_EQ(nan, 1);
  EXPECT_EQ(Occurrences(svg, "<polyline class=\"loss series-0\""), 1);
  EXPECT_EQ(Occurrences(svg, "<polyline class=\"loss series-1\""), 2) << "the NaN breaks it";
  EXPECT_EQ(Occurrences(svg, "class=\"loss-point series-0\""), 4);
  EXPECT_EQ(Occurrences(svg, "class=\"legend-entry series-0\""), 1);
  EXPECT_EQ(Occurrences(svg, "class=\"legend-entry series-1\""), 1);
  EXPECT_TRUE(Has(svg, ">job-000001 (cp1) — SUCCEEDED, steps 1–4</text>")) << svg;
  EXPECT_TRUE(Has(svg, "<title>job-000002 (cp4): step 3 loss 2.5 lr 0.001</title>"));
  EXPECT_TRUE(Has(svg, "<title>cp1 vs cp4 &lt;&amp;&gt;</title>"));
  EXPECT_FALSE(Has(svg, "learning rate")) << "one loss axis, no rate axis";
  // The two series differ in colour.
  EXPECT_TRUE(Has(svg, "class=\"loss series-0\" fill=\"none\" stroke=\"#1f77b4\""));
  EXPECT_TRUE(Has(svg, "class=\"loss series-1\" fill=\"none\" stroke=\"#ff7f0e\""));

  const std::string empty = RenderOverlaySvg("none yet", {{"a", "", {}}, {"b", "", {}}});
  WriteFile(dir / "empty.svg", empty);
  EXPECT_EQ(CountPoints(dir / "empty.svg"), 0);
  EXPECT_TRUE(Has(empty, "no steps yet"));
}

// Text unescaped from the few entities XmlEscape writes.
std::string Unescape(std::string text) {
  for (const auto& [entity, c] : std::vector<std::pair<std::string, std::string>>{
           {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&apos;", "'"}, {"&amp;", "&"}}) {
    for (size_t at = text.find(entity); at != std::string::npos; at = text.find(entity, at)) {
      text.replace(at, entity.size(), c);
      at += c.size();
    }
  }
  return text;
}

// Every line of the legend lies inside the picture: from its x, its estimated width (the
// PlotTextUnits of the line at kPlotGlyphEm of the font size, 11) ends before the SVG's width,
// and its baseline is above the SVG's height. Returns the legend's lines, in order.
std::vector<std::string> ExpectLegendInside(const std::string& svg) {
  std::smatch size;
  EXPECT_TRUE(std::regex_search(
      svg, size, std::regex(R"re(<svg [^>]*width="([0-9.]+)" height="([0-9.]+)")re")));
  const double width = std::stod(size[1]), height = std::stod(size[2]);
  const size_t begin = svg.find("<g class=\"legend\" font-size=\"11.00\">");
  EXPECT_NE(begin, std::string::npos) << svg;
  const std::string legend = svg.substr(begin, svg.find("</g>", begin) - begin);
  // A plain <text x y ...>label</text>, or a <tspan x y>line</tspan> of a wrapped one.
  const std::regex line(R"re(<(?:text|tspan) x="([0-9.]+)" y="([0-9.]+)"[^>]*>([^<]+)</)re");
  std::vector<std::string> lines;
  double last_y = 0;
  for (auto it = std::sregex_iterator(legend.begin(), legend.end(), line);
       it != std::sregex_iterator(); ++it) {
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]);
    const std::string text = Unescape((*it)[3]);
    const double right = x + PlotTextUnits(text) * kPlotGlyphEm * 11;
    EXPECT_LE(right, width) << "cut at the right edge: " << text;
    EXPECT_LE(y + 4, height) << "cut at the bottom: " << text;  // descenders below the baseline
    EXPECT_GT(y, last_y) << "lines overlap: " << text;
    last_y = y;
    lines.push_back(text);
  }
  return lines;
}

TEST(RenderOverlaySvgTest, EachJobsValidationIsADashedSeriesInItsColour) {
  TempDir dir;
  PlotSeries a{"job-000001 (cp1)", "SUCCEEDED", {}};
  PlotSeries b{"job-000002 (cp4)", "SUCCEEDED", {}};
  PlotSeries c{"job-000003 (none)", "SUCCEEDED", {}};
  for (int step = 1; step <= 6; ++step) {
    a.points.push_back({step, 5.0 - step * 0.5, 1e-3});
    b.points.push_back({step, 5.2 - step * 0.5, 1e-3});
    c.points.push_back({step, 5.4 - step * 0.5, 1e-3});
  }
  a.validation = {{2, 4.5, 0}, {4, 3.75, 0}, {6, 3.0, 0}};
  b.validation = {{3, 4.0, 0}, {6, kNaN, 0}};
  // A validation loss below every training loss: the axis must reach it.
  c.validation.clear();
  a.validation.push_back({7, 0.25, 0});
  const std::string svg = RenderOverlaySvg("three", {a, b, c});
  WriteFile(dir / "validation.svg", svg);
  ExpectFiniteCoordinates(svg);
  EXPECT_EQ(CountPoints(dir / "validation.svg"), 18) << "validation markers are not loss points";
  EXPECT_EQ(Occurrences(svg,
                        "<polyline class=\"validation series-0\" fill=\"none\" "
                        "stroke=\"#1f77b4\" stroke-width=\"1.5\" stroke-dasharray=\"6 3\""),
            1);
  EXPECT_EQ(Occurrences(svg,
                        "<polyline class=\"validation series-1\" fill=\"none\" "
                        "stroke=\"#ff7f0e\""),
            1);
  EXPECT_EQ(Occurrences(svg, "class=\"validation series-2\""), 0) << "job 3 did not validate";
  EXPECT_EQ(Occurrences(svg, "class=\"validation-point series-0\""), 4);
  EXPECT_EQ(Occurrences(svg, "class=\"validation-point series-1\""), 1) << "the NaN has no marker";
  EXPECT_TRUE(Has(svg, "<title>job-000002 (cp4): step 3 validation loss 4</title>")) << svg;
  // One legend entry per job, one more per job that validated, after its own.
  EXPECT_EQ(Occurrences(svg, "class=\"legend-entry series-0\""), 1);
  EXPECT_EQ(Occurrences(svg, "class=\"legend-entry validation series-0\""), 1);
  EXPECT_EQ(Occurrences(svg, "class=\"legend-entry validation series-1\""), 1);
  EXPECT_EQ(Occurrences(svg, "class=\"legend-entry validation series-2\""), 0);
  const std::vector<std::string> lines = ExpectLegendInside(svg);
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "job-000001 (cp1) — SUCCEEDED", "job-000001 (cp1) — validation loss",
                       "job-000002 (cp4) — SUCCEEDED", "job-000002 (cp4) — validation loss",
                       "job-000003 (none) — SUCCEEDED"}));
  // The swatch of a validation entry is dashed in the job's colour.
  EXPECT_TRUE(Has(svg, "stroke=\"#ff7f0e\" stroke-width=\"1.5\" stroke-dasharray=\"6 3\"/>"));
  // The loss axis covers the lowest validation loss: a tick at or below 0.25.
  std::smatch tick;
  ASSERT_TRUE(
      std::regex_search(svg, tick, std::regex(R"re(text-anchor="end">([0-9.]+)</text>)re")));
  EXPECT_LE(std::stod(tick[1]), 0.25);
}

TEST(RenderOverlaySvgTest, TheLegendFitsWhateverTheNamesAndHowMany) {
  TempDir dir;
  std::vector<PlotSeries> series;
  const std::string words =
      "a job name of many words that goes on and on, far past the width of the picture, "
      "so that its legend entry must wrap onto a second and a third line <&> to be read whole";
  const std::string one_word(300, 'W');
  const std::string wide = "学習率の比較実験" + std::string("、長い名前") + "の続き";
  for (int k = 0; k < 12; ++k) {
    const std::string name = k == 0   ? words
                             : k == 1 ? one_word
                             : k == 2 ? wide + wide + wide + wide
                                      : "job-" + std::to_string(k);
    PlotSeries one{"job-00000" + std::to_string(k) + " (" + name + ")",
                   "SUCCEEDED, steps 1–3 of 3, last loss 2.5",
                   {}};
    for (int step = 1; step <= 3; ++step) one.points.push_back({step, 4.0 - step + k * 0.01, 1e-3});
    if (k % 2 == 0) one.validation = {{3, 1.5, 0}};  // a legend entry more, as long as the job's
    series.push_back(one);
  }
  const std::string svg = RenderOverlaySvg("twelve jobs", series);
  WriteFile(dir / "many.svg", svg);
  EXPECT_EQ(CountPoints(dir / "many.svg"), 36);
  ExpectFiniteCoordinates(svg);
  const std::vector<std::string> lines = ExpectLegendInside(svg);
  EXPECT_GT(lines.size(), 24u) << "the long entries wrap";
  // Nothing is dropped: the words of the first entry are all there, in order.
  std::string joined;
  for (size_t i = 0; i < 4 && i < lines.size(); ++i) joined += lines[i] + " ";
  EXPECT_TRUE(Has(joined, "must wrap onto a second and a third line <&> to be read whole"))
      << joined;
  for (size_t k = 0; k < series.size(); ++k) {
    EXPECT_EQ(Occurrences(svg, "class=\"legend-entry series-" + std::to_string(k) + "\""), 1);
    EXPECT_EQ(
        Occurrences(svg, "class=\"legend-entry validation series-" + std::to_string(k) + "\""),
        k % 2 == 0 ? 1 : 0);
  }
  EXPECT_EQ(lines.back(), "job-0000011 (job-11) — SUCCEEDED, steps 1–3 of 3, last loss 2.5");
  // Two short names keep one line each.
  const std::string two = RenderOverlaySvg("two", {{"job-000001 (a)", "SUCCEEDED", {{1, 2, 1e-3}}},
                                                   {"job-000002 (b)", "FAILED", {{1, 3, 1e-3}}}});
  EXPECT_EQ(ExpectLegendInside(two).size(), 2u);
}

TEST(NiceTicksTest, RoundValuesCoveringTheRange) {
  const struct {
    double lo, hi;
    bool integer_steps;
  } cases[] = {{1, 37, true},         {5, 5, true},         {0.93, 6.1, false},  {2, 2, false},
               {0, 0, false},         {3e-4, 3e-4, false},  {1e-9, 2e-9, false}, {-3, 7, false},
               {1e6, 1e6 + 1, false}, {-5e-5, -1e-5, false}};
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "[" << c.lo << ", " << c.hi << "]");
    const Ticks ticks = NiceTicks(c.lo, c.hi, 6, c.integer_steps);
    EXPECT_LE(ticks.first, c.lo);
    EXPECT_GE(ticks.last, c.hi);
    EXPECT_LT(ticks.first, ticks.last);
    ASSERT_GE(ticks.values.size(), 2u);
    EXPECT_LE(ticks.values.size(), 25u);
    EXPECT_EQ(ticks.values.front(), ticks.first);
    EXPECT_EQ(ticks.values.back(), ticks.last);
    const double mantissa = ticks.step / std::pow(10, std::floor(std::log10(ticks.step)));
    EXPECT_TRUE(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 ||
                std::abs(mantissa - 5) < 1e-9)
        << ticks.step;
    if (c.integer_steps) {
      EXPECT_GE(ticks.step, 1);
    }
  }
  const Ticks steps = NiceTicks(1, 37, 10, true);
  EXPECT_EQ(steps.values, (std::vector<double>{0, 5, 10, 15, 20, 25, 30, 35, 40}));
}

TEST(NiceTicksTest, FormatTick) {
  EXPECT_EQ(FormatTick(0.0003, 0.0001), "0.0003");
  EXPECT_EQ(FormatTick(40, 10), "40");
  EXPECT_EQ(FormatTick(2.5, 0.5), "2.5");
  EXPECT_EQ(FormatTick(0.30000000000000004, 0.1), "0.3");
  EXPECT_EQ(FormatTick(-1e-17, 0.1), "0.0");
  EXPECT_EQ(FormatTick(1e-5, 1e-5), "1e-05");
  EXPECT_EQ(FormatTick(2.5e-5, 5e-6), "2.5e-05");
  EXPECT_EQ(FormatTick(3e8, 1e8), "3e+08");
}

}  // namespace
}  // namespace ringtrain::testing
