// Checks of the SVG files `ringctl plot` writes, shared by the rendering unit test
// (tests/unit/plot_svg_test.cc) and the command's integration test (ringctl_plot_test.cc).
#ifndef RINGTRAIN_TESTS_INTEGRATION_SVG_CHECK_H_
#define RINGTRAIN_TESTS_INTEGRATION_SVG_CHECK_H_

#include <string>

namespace ringtrain::testing {

// xmllint's path, from $PATH; "" when it is not installed (Debian's libxml2-utils).
std::string Xmllint();

// Checks `file` with `xmllint --noout` and returns how many elements have the class "loss-point"
// (and, in `*nan`, how many also have "nan"); -1 (with a test failure) when xmllint is missing or
// rejects it.
int CountPoints(const std::string& file, int* nan = nullptr);

// Every coordinate attribute holds plain numbers (no "nan", "inf", "e+308"); a test failure per
// offending attribute.
void ExpectFiniteCoordinates(const std::string& svg);

}  // namespace ringtrain::testing

#endif  // RINGTRAIN_TESTS_INTEGRATION_SVG_CHECK_H_
