#!/usr/bin/env bash
# Configures and builds into ./build (Release). Incremental when re-run.
#   scripts/build.sh                          everything
#   scripts/build.sh --target ringtrain-run   arguments go to `cmake --build`
# Extra configure options come from $CMAKE_ARGS (e.g. CMAKE_ARGS=-DRINGTRAIN_CUDA=ON).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} > "$BUILD_DIR.configure.log" 2>&1 || {
  cat "$BUILD_DIR.configure.log"; exit 1; }
start=$(date +%s)
cmake --build "$BUILD_DIR" -j"$(nproc)" "$@"
echo "build: done in $(( $(date +%s) - start )) s"
