// Where this process's executable is: the project's binaries find each other beside it (the
// launcher and the agent find ringtrain-trainer, ringctl finds ringtrain-run, the coordinator and
// the worker agent).
#ifndef RINGTRAIN_COMMON_EXECUTABLE_PATH_H_
#define RINGTRAIN_COMMON_EXECUTABLE_PATH_H_

#include <string>

namespace ringtrain {

// `name` in the folder of this process's executable, or "" when /proc/self/exe cannot be read
// (errno then says why).
std::string BesideThisExecutable(const std::string& name);

}  // namespace ringtrain

#endif  // RINGTRAIN_COMMON_EXECUTABLE_PATH_H_
