#!/usr/bin/env bash
# Configures and builds into ./build (Release). Incremental when re-run.
#   scripts/build.sh                          everything
#   scripts/build.sh --target ringtrain-run   arguments go to `cmake --build`
# Extra configure options come from $CMAKE_ARGS (e.g. CMAKE_ARGS=-DRINGTRAIN_CUDA=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# ccache (installed by scripts/setup.sh) keeps objects outside the clone (~/.cache/ccache), keyed by
# paths relative to the clone (CCACHE_BASEDIR), so a second clone on the same machine, such as CI's,
# compiles only what changed; a machine without it builds everything, only slower.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
  # The engine's objects include LibTorch through one precompiled header (CMakeLists.txt).
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" ${CMAKE_ARGS:-} > "$BUILD_DIR.configure.log" 2>&1 || {
  cat "$BUILD_DIR.configure.log"; exit 1; }
start=$(date +%s)
cmake --build "$BUILD_DIR" -j"$(nproc)" "$@"
echo "build: done in $(( $(date +%s) - start )) s"
