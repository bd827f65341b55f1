#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/README.md) with clang, AddressSanitizer and UBSan into
# build-fuzz/ (RelWithDebInfo: optimised, with line tables for the reports) and runs each for N
# seconds on a scratch copy of its corpus, fuzz/corpus/<target>/, one target at a time. A crash,
# a broken invariant, a leak, a timeout or an out-of-memory fails the run, and the input that
# caused it is copied into fuzz/corpus/<target>/, so that fuzz_regression_test (the normal suite)
# runs it from then on: commit it with the fix. Inputs listed in fuzz/not_yet_fixed.txt are left
# out of the runs.
#   scripts/fuzz.sh [--seconds N] [target...]     default: 60 s each, every target
# FUZZ_BUILD_DIR (default build-fuzz) chooses the build folder; FUZZ_CMAKE_ARGS adds configure
# options; extra libFuzzer flags come from FUZZ_FLAGS (e.g. FUZZ_FLAGS=-max_len=100000).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
    --seconds=*) seconds=${1#--seconds=}; shift ;;
    -*) echo "usage: scripts/fuzz.sh [--seconds N] [target...]" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=()
for dir in fuzz/corpus/*/; do all+=("$(basename "$dir")"); done
if [ ${#targets[@]} -eq 0 ]; then targets=("${all[@]}"); fi
for t in "${targets[@]}"; do
  if [ ! -d "fuzz/corpus/$t" ]; then
    echo "fuzz: no target '$t' (targets: ${all[*]})" >&2; exit 2
  fi
done

build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
# Every object carries the coverage counters and both sanitizers; UB is fatal, so libFuzzer keeps
# the input. -fno-sanitize=vptr: LibTorch is built without it, and its classes' typeinfo would be
# read as mismatches.
sanitize="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
sanitize+=" -fno-sanitize=vptr -fno-omit-frame-pointer"
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
mkdir -p "$build_dir"
start=$(date +%s)
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ "-DCMAKE_CXX_FLAGS=$sanitize" -DRINGTRAIN_FUZZ=ON \
  -DRINGTRAIN_BUILD_TESTS=OFF "${launcher[@]}" ${FUZZ_CMAKE_ARGS:-} > "$build_dir.configure.log" 2>&1 || {
  cat "$build_dir.configure.log"; exit 1; }
binaries=()
for t in "${targets[@]}"; do binaries+=("fuzz_$t"); done
cmake --build "$build_dir" -j"$(nproc)" --target "${binaries[@]}"
echo "fuzz: built ${binaries[*]} in $(( $(date +%s) - start )) s"

# LibTorch's own threads are not what is being fuzzed; one keeps the runs comparable.
export OMP_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for t in "${targets[@]}"; do
  work=$(mktemp -d "${TMPDIR:-/tmp}/ringtrain-fuzz-$t.XXXXXX")
  mkdir "$work/corpus" "$work/artifacts"
  cp -r "fuzz/corpus/$t/." "$work/corpus/"
  # Inputs whose fix is not merged yet (fuzz/not_yet_fixed.txt) would only be found again.
  while read -r known; do
    case "$known" in "$t"/*) rm -f "$work/corpus/${known#"$t"/}" ;; esac
  done < <(grep -v '^#' fuzz/not_yet_fixed.txt | grep -v '^$' || true)
  args=("$work/corpus" "-max_total_time=$seconds" "-artifact_prefix=$work/artifacts/"
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
  if [ -f "fuzz/dict/$t.dict" ]; then args+=("-dict=fuzz/dict/$t.dict"); fi
  # shellcheck disable=SC2086
  if "$build_dir/bin/fuzz_$t" "${args[@]}" ${FUZZ_FLAGS:-} > "$work/log" 2>&1; then
    stats=$(grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' \
      "$work/log" | sed 's/^stat:://' | tr '\n' ' ')
    echo "fuzz: $t: ${seconds} s, no crash: $stats"
    rm -rf "$work"
    continue
  fi
  failed+=("$t")
  tail -n 60 "$work/log"
  found=0
  for input in "$work"/artifacts/*; do
    [ -f "$input" ] || continue
    found=1
    name=$(basename "$input")
    cp "$input" "fuzz/corpus/$t/$name"
    echo "fuzz: $t FAILED: the input is now fuzz/corpus/$t/$name; reproduce with" \
         "$build_dir/bin/fuzz_$t fuzz/corpus/$t/$name, fix the code, and commit the input" \
         "with the fix (fuzz_regression_test runs it from then on)" >&2
  done
  if [ "$found" = 0 ]; then
    echo "fuzz: $t FAILED without leaving an input; the whole log is $work/log" >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: every target ran ${seconds} s without a finding: ${targets[*]}"
