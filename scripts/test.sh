#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing, builds both builds
# from the same sources — the CPU build (build/: everything, tests included) and the CUDA build
# (build-cuda/: ringtrain-trainer with the CUDA/NCCL code paths, compiled and linked; nothing CUDA
# runs here) — and runs every CTest test (GoogleTest) of the CPU build, in parallel where safe
# (cuda_build_test reads the CUDA trainer with readelf/ldd). `--quick` skips the slowest tests.
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
scripts/build.sh
echo "test: the CUDA build (build-cuda/, -DRINGTRAIN_CUDA=ON): ringtrain-trainer"
BUILD_DIR=build-cuda CMAKE_ARGS="-DRINGTRAIN_CUDA=ON -DRINGTRAIN_BUILD_TESTS=OFF" \
  scripts/build.sh --target ringtrain-trainer
cd build
ctest_args=(--output-on-failure --timeout 900 -j "$(nproc)")
if [ "$quick" = 1 ]; then ctest_args+=(-LE slow); fi
# One intra-op thread per test process: tests run side by side on the machine's cores.
OMP_NUM_THREADS=1 ctest "${ctest_args[@]}"
