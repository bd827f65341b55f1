#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing, builds both builds
# from the same sources — the CPU build (build/: everything, tests included) and the CUDA build
# (build-cuda/: ringtrain-trainer with the CUDA/NCCL code paths, compiled and linked; nothing CUDA
# runs here) — and runs every CTest test (GoogleTest) of the CPU build, in parallel where safe
# (cuda_build_test reads the CUDA trainer with readelf/ldd). `--quick` skips the slowest tests.
# BUILD_DIR (default build) and CUDA_BUILD_DIR (default build-cuda) choose the two build folders.
# Then a short run of every fuzz target (scripts/fuzz.sh in FUZZ_BUILD_DIR, default build-fuzz;
# FUZZ_SECONDS each, default 5): a finding fails the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
  esac
done
scripts/setup.sh
build_dir=${BUILD_DIR:-build}
cuda_build_dir=${CUDA_BUILD_DIR:-build-cuda}
BUILD_DIR=$build_dir CMAKE_ARGS="${CMAKE_ARGS:-} -DRINGTRAIN_CUDA_BUILD_DIR=$(realpath -m "$cuda_build_dir")" \
  scripts/build.sh
echo "test: the CUDA build ($cuda_build_dir/, -DRINGTRAIN_CUDA=ON): ringtrain-trainer, ringtrain-gpu-check"
BUILD_DIR=$cuda_build_dir CMAKE_ARGS="-DRINGTRAIN_CUDA=ON -DRINGTRAIN_BUILD_TESTS=OFF" \
  scripts/build.sh --target ringtrain-trainer ringtrain-gpu-check
cd "$build_dir"
ctest_args=(--output-on-failure --timeout 900 -j "$(nproc)")
if [ "$quick" = 1 ]; then ctest_args+=(-LE slow); fi
# One intra-op thread per test process: tests run side by side on the machine's cores.
OMP_NUM_THREADS=1 ctest "${ctest_args[@]}"
cd - >/dev/null
echo "test: a short run of every fuzz target (scripts/fuzz.sh --seconds ${FUZZ_SECONDS:-5})"
scripts/fuzz.sh --seconds "${FUZZ_SECONDS:-5}"
