#!/usr/bin/env bash
# Configures and builds everything into ./build (Release). Incremental when re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "$@" > "$BUILD_DIR.configure.log" 2>&1 || {
  cat "$BUILD_DIR.configure.log"; exit 1; }
start=$(date +%s)
cmake --build "$BUILD_DIR" -j"$jobs"
echo "build: done in $(( $(date +%s) - start )) s"
