#include "tests/integration/svg_check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <sstream>

#include "tests/integration/test_util.h"

namespace ringtrain::testing {

std::string Xmllint() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/xmllint";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

int CountPoints(const std::string& file, int* nan) {
  const std::string xmllint = Xmllint();
  EXPECT_FALSE(xmllint.empty()) << "xmllint not found: install libxml2-utils (scripts/setup.sh)";
  if (xmllint.empty()) return -1;
  const CommandResult lint = RunCommand({xmllint, "--noout", file});
  EXPECT_EQ(lint.exit_code, 0) << "xmllint rejects " << file << ":\n" << lint.output;
  if (lint.exit_code != 0) return -1;
  auto count = [&](const std::string& cls) {
    const CommandResult r = RunCommand(
        {xmllint, "--xpath",
         "count(//*[contains(concat(' ', normalize-space(@class), ' '), ' " + cls + " ')])", file});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return std::atoi(r.output.c_str());
  };
  if (nan) *nan = count("nan");
  return count("loss-point");
}

void ExpectFiniteCoordinates(const std::string& svg) {
  static const std::regex kAttribute(
      R"re(\s(cx|cy|x|y|x1|y1|x2|y2|r|points|d|width|height)="([^"]*)")re");
  static const std::regex kNumbers(R"([-0-9., ML%]*)");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), kAttribute);
       it != std::sregex_iterator(); ++it) {
    EXPECT_TRUE(std::regex_match((*it)[2].str(), kNumbers)) << (*it)[0].str();
  }
}

}  // namespace ringtrain::testing
