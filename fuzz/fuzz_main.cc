// The libFuzzer entry point of one target: fuzz/CMakeLists.txt compiles this file once per binary
// with RINGTRAIN_FUZZ_FUNCTION naming that target's function (fuzz_targets.h). A broken invariant
// aborts, which libFuzzer reports as a crash and saves the input.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string problem = ringtrain::fuzz::RINGTRAIN_FUZZ_FUNCTION(data, size);
  if (!problem.empty()) {
    std::fprintf(stderr, "fuzz: invariant broken: %s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
