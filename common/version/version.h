// The version and the git commit a binary was built from, for every binary's --version. Both live
// in one source file generated at build time (common/version/build_info.cc.in), compiled into the
// tiny ringtrain_version library that only the binaries link: a new commit recompiles that file and
// relinks them, nothing else.
#ifndef RINGTRAIN_COMMON_VERSION_VERSION_H_
#define RINGTRAIN_COMMON_VERSION_VERSION_H_

#include <string>

namespace ringtrain {

// The project's version ("0.1.0", CMakeLists.txt's project()).
const char* BuildVersion();
// The commit, 12 hex digits, with "-modified" when tracked files differed from it at build time;
// $RINGTRAIN_GIT_COMMIT where the tree has no .git; "unknown" when neither tells.
const char* BuildCommit();

// "<binary> <version> (commit <commit>)", what --version prints.
std::string VersionLine(const std::string& binary);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_VERSION_VERSION_H_
