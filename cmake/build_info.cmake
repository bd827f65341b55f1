# Run at every build (cmake -P, from common/version/CMakeLists.txt): writes OUTPUT, the one source
# file that holds the version and the commit this tree is at. configure_file rewrites it only when
# its text changes, so a build at the same commit compiles nothing, and a new commit recompiles this
# one file and relinks the binaries that print it (nothing else links it).
#   -DSOURCE_DIR=<the source tree> -DVERSION=<project version> -DINPUT=<template> -DOUTPUT=<file>
set(commit "unknown")
set(dirty "")
find_package(Git QUIET)
if(DEFINED ENV{RINGTRAIN_GIT_COMMIT} AND NOT "$ENV{RINGTRAIN_GIT_COMMIT}" STREQUAL "")
  # A tree without its .git (a container build context) is told its commit from outside.
  set(commit "$ENV{RINGTRAIN_GIT_COMMIT}")
elseif(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE head RESULT_VARIABLE head_result ERROR_QUIET
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(head_result EQUAL 0 AND NOT head STREQUAL "")
    set(commit "${head}")
    # Tracked files changed since the commit: the binaries are not exactly that commit.
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} status --porcelain
                            --untracked-files=no
                    OUTPUT_VARIABLE changes RESULT_VARIABLE status_result ERROR_QUIET)
    if(status_result EQUAL 0 AND NOT changes STREQUAL "")
      set(dirty "-modified")
    endif()
  endif()
endif()
set(RINGTRAIN_VERSION "${VERSION}")
set(RINGTRAIN_COMMIT "${commit}${dirty}")
configure_file(${INPUT} ${OUTPUT} @ONLY)
