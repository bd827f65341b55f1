#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing, builds everything,
# runs every CTest test (GoogleTest), in parallel where safe. `--quick` skips the slowest tests.
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
cd build
ctest_args=(--output-on-failure --timeout 900 -j "$(nproc)")
if [ "$quick" = 1 ]; then ctest_args+=(-LE slow); fi
# One intra-op thread per test process: tests run side by side on the machine's cores.
OMP_NUM_THREADS=1 ctest "${ctest_args[@]}"
