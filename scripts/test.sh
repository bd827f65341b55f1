#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: installs what is missing, builds both builds
# from the same sources — the CPU build (build/: everything, tests included) and the CUDA build
# (build-cuda/: ringtrain-trainer with the CUDA/NCCL code paths, compiled and linked; nothing CUDA
# runs here) — and runs every CTest test (GoogleTest) of the CPU build, in parallel where safe
# (cuda_build_test reads the CUDA trainer with readelf/ldd). `--quick` skips the slowest tests.
# BUILD_DIR (default build) and CUDA_BUILD_DIR (default build-cuda) choose the two build folders.
# Then a short run of every fuzz target (scripts/fuzz.sh in FUZZ_BUILD_DIR, default build-fuzz;
# FUZZ_SECONDS each, default 5): a finding fails the suite. Before building, every C++ source must be
# formatted as .clang-format says (scripts/format.sh --check).
# Last, the container image: the CPU runtime image packaged from build/ (scripts/image.sh package:
# no compiling; the Debian base is made once per machine and cached in ~/.cache/ringtrain) and its
# smoke test (scripts/image.sh smoke: ldd inside the image, then a coordinator and two workers as
# containers train a cp=2 job). RINGTRAIN_IMAGE (default localhost/ringtrain:test) names it.
# At the end (also when a phase fails) it prints each phase's time and the ten slowest tests, so the
# CI budget stays visible.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
  esac
done

# Phase timing: `phase NAME` closes the previous phase and opens NAME; the summary prints on exit.
phase_names=()
phase_seconds=()
phase_name=""
phase_start=0
phase() {
  local now
  now=$(date +%s)
  if [ -n "$phase_name" ]; then
    phase_names+=("$phase_name")
    phase_seconds+=($((now - phase_start)))
  fi
  phase_name=$1
  phase_start=$now
}
ctest_log=""
summary() {
  local rc=$?
  phase ""
  echo "test: phase times$([ "$rc" = 0 ] || echo " (stopped by a failure, exit $rc)"):"
  local total=0 i
  for i in "${!phase_names[@]}"; do
    printf '  %-12s %5d s\n' "${phase_names[$i]}" "${phase_seconds[$i]}"
    total=$((total + phase_seconds[i]))
  done
  printf '  %-12s %5d s\n' total "$total"
  if [ -n "$ctest_log" ] && [ -s "$ctest_log" ]; then
    echo "test: the ten slowest tests:"
    # ctest's result lines: "  12/859 Test  #34: Name ......   Passed   12.34 sec"
    # awk reads all of sort's output: `head` would close the pipe early, and sort's SIGPIPE then failed
    # the whole run under pipefail (exit 141) after every phase had passed.
    sed -n 's/^ *[0-9]*\/[0-9]* *Test *#[0-9]*: \([^ ]*\) .* \([0-9.]*\) sec$/\2 \1/p' "$ctest_log" |
      sort -rn | awk 'NR <= 10 { printf "  %8.1f s  %s\n", $1, $2 }'
  fi
  exit "$rc"
}
trap summary EXIT

phase setup
scripts/setup.sh
phase format
scripts/format.sh --check
build_dir=${BUILD_DIR:-build}
cuda_build_dir=${CUDA_BUILD_DIR:-build-cuda}
phase build
BUILD_DIR=$build_dir CMAKE_ARGS="${CMAKE_ARGS:-} -DRINGTRAIN_CUDA_BUILD_DIR=$(realpath -m "$cuda_build_dir")" \
  scripts/build.sh
phase build-cuda
echo "test: the CUDA build ($cuda_build_dir/, -DRINGTRAIN_CUDA=ON): ringtrain-trainer, ringtrain-gpu-check"
BUILD_DIR=$cuda_build_dir CMAKE_ARGS="-DRINGTRAIN_CUDA=ON -DRINGTRAIN_BUILD_TESTS=OFF" \
  scripts/build.sh --target ringtrain-trainer ringtrain-gpu-check
phase ctest
ctest_log=$(realpath -m "$build_dir/ctest-output.log")
cd "$build_dir"
ctest_args=(--output-on-failure --timeout 900 -j "$(nproc)")
if [ "$quick" = 1 ]; then ctest_args+=(-LE slow); fi
# One intra-op thread per test process: tests run side by side on the machine's cores.
OMP_NUM_THREADS=1 ctest "${ctest_args[@]}" 2>&1 | tee "$ctest_log"
cd - >/dev/null
phase fuzz
echo "test: a short run of every fuzz target (scripts/fuzz.sh --seconds ${FUZZ_SECONDS:-5})"
scripts/fuzz.sh --seconds "${FUZZ_SECONDS:-5}"
phase image
export RINGTRAIN_IMAGE=${RINGTRAIN_IMAGE:-localhost/ringtrain:test}
BUILD_DIR=$build_dir scripts/image.sh package
BUILD_DIR=$build_dir scripts/image.sh smoke
