#!/usr/bin/env bash
# Lays out what the runtime image holds, as a tree to copy to / — used by the Dockerfiles' build
# stage (from source) and by `scripts/image.sh package` (from a build already made), so that both
# images hold the same files:
#   usr/local/bin/       ringtrain-coordinator, -worker, -trainer, -run, ringctl, ringtrain-tokenize,
#                        ringtrain-convert, ringtrain-health (symbols stripped)
#   opt/ringtrain/lib/   CPU image: the wheel's libraries that ldd resolves for those binaries
#                        (libtorch_cpu, libc10, its libgomp, and the CUDA runtime and CUPTI that
#                        libtorch_cpu links)
#   opt/ringtrain/site-packages/{torch/lib,nvidia}/   --cuda: the wheel's libraries in their
#                        site-packages layout ($ORIGIN RPATHs), less what LibTorch never loads
#   deploy/docker/stage.sh --out DIR --bin-dir DIR [--trainer-bin-dir DIR] --site-packages DIR [--cuda]
# --trainer-bin-dir: where ringtrain-trainer comes from (the CUDA build's), default --bin-dir.
# RINGTRAIN_IMAGE_SLIM=0 keeps the whole wheel folders in --cuda (to measure what slimming saves).
set -euo pipefail
die() { echo "stage: $*" >&2; exit 1; }
out="" bin_dir="" trainer_bin_dir="" site="" cuda=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --bin-dir) bin_dir=$2; shift 2 ;;
    --trainer-bin-dir) trainer_bin_dir=$2; shift 2 ;;
    --site-packages) site=$2; shift 2 ;;
    --cuda) cuda=1; shift ;;
    *) die "unknown argument $1. usage: stage.sh --out DIR --bin-dir DIR [--trainer-bin-dir DIR]" \
         "--site-packages DIR [--cuda]" ;;
  esac
done
if [ -z "$out" ] || [ -z "$bin_dir" ] || [ -z "$site" ]; then
  die "--out, --bin-dir and --site-packages are required"
fi
trainer_bin_dir=${trainer_bin_dir:-$bin_dir}
[ -f "$site/torch/lib/libtorch_cpu.so" ] || die "$site/torch/lib/libtorch_cpu.so is missing:" \
  "--site-packages must be the site-packages of the environment the binaries were built with" \
  "(scripts/setup.sh's .venv/lib/python3.11/site-packages)"
site=$(cd "$site" && pwd)

binaries=(ringtrain-coordinator ringtrain-worker ringtrain-run ringctl ringtrain-tokenize
          ringtrain-convert ringtrain-health)
mkdir -p "$out/usr/local/bin"
for b in "${binaries[@]}" ringtrain-trainer; do
  from=$bin_dir
  [ "$b" = ringtrain-trainer ] && from=$trainer_bin_dir
  [ -x "$from/$b" ] || die "$from/$b is missing. HINT: scripts/build.sh builds it (the CUDA" \
    "trainer: BUILD_DIR=build-cuda CMAKE_ARGS=-DRINGTRAIN_CUDA=ON scripts/build.sh --target ringtrain-trainer)"
  if command -v strip >/dev/null; then
    strip --strip-unneeded -o "$out/usr/local/bin/$b" "$from/$b"
  else
    cp "$from/$b" "$out/usr/local/bin/$b"
  fi
done

if [ "$cuda" = 0 ]; then
  # Every library of the wheel that the binaries load, as ldd resolves them (through their RPATH).
  mkdir -p "$out/opt/ringtrain/lib"
  for b in "${binaries[@]}" ringtrain-trainer; do
    from=$bin_dir
    [ "$b" = ringtrain-trainer ] && from=$trainer_bin_dir
    ldd "$from/$b"
  done | awk -v site="$site/" 'index($3, site) == 1 {print $3}' | sort -u |
    xargs -r cp -L -t "$out/opt/ringtrain/lib"
  for lib in libtorch_cpu.so libc10.so; do
    [ -f "$out/opt/ringtrain/lib/$lib" ] || die "ldd found no $lib under $site for ringtrain-trainer"
  done
else
  # The CUDA image: torch/lib and nvidia/ (LibTorch dlopens some of them, which ldd cannot list),
  # less what nothing in a LibTorch (C++) process loads: the Python bindings, headers, static
  # libraries, and CUDA libraries LibTorch does not name (cusolverMg, cuFFTW, NVBLAS, the
  # alternative-ABI NVRTC).
  dest=$out/opt/ringtrain/site-packages
  mkdir -p "$dest/torch"
  cp -a "$site/torch/lib" "$dest/torch/lib"
  cp -a "$site/nvidia" "$dest/nvidia"
  if [ "${RINGTRAIN_IMAGE_SLIM:-1}" != 0 ]; then
    rm -rf "$dest/torch/lib/libtorch_python.so" "$dest/torch/lib"/libshm* "$dest"/nvidia/*/include
    find "$dest" \( -name '*.a' -o -name '*.bc' -o -name 'libcusolverMg.so*' -o -name 'libcufftw.so*' \
      -o -name 'libnvblas.so*' -o -name 'libnvrtc*.alt.so*' -o -name '__pycache__' -o -name '*.py' \) \
      -prune -exec rm -rf {} +
  fi
fi
echo "stage: $out: $(du -sh "$out" | cut -f1)"
