#include "common/version/version.h"

namespace ringtrain {

std::string VersionLine(const std::string& binary) {
  return binary + " " + BuildVersion() + " (commit " + BuildCommit() + ")";
}

}  // namespace ringtrain
