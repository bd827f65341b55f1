#!/usr/bin/env bash
# Packs what tests/gpu/check.sh needs on a machine with one NVIDIA GPU, a PyTorch 2.x install and
# nothing else (no package manager, no network) into one folder, to copy there:
#   bin/   ringtrain-trainer and ringtrain-gpu-check (the CUDA build), ringtrain-run (the CPU build;
#          it links only abseil and starts the ringtrain-trainer beside it)
#   lib/   the shared libraries those binaries need that a machine with only PyTorch may lack:
#          abseil, toml++ (what ldd resolves outside torch's wheels, glibc and the C++ runtime)
#   lib/cxx/  libstdc++ and libgcc_s of this machine, which check.sh adds only when the GPU
#          machine's own are too old for the binaries
#   configs/, tests/gpu/, tests/parity/llama_reference.py (the eager model), MANIFEST
# MANIFEST lists the torch version the binaries were built against (the build's .venv), which
# check.sh requires on the GPU machine (same major.minor).
#   scripts/gpu_bundle.sh [--out DIR] [--build-dir DIR] [--cuda-build-dir DIR] [--python PY]
# Defaults: gpu-bundle/ (git-ignored), build/, build-cuda/, .venv/bin/python. Safe to re-run: it
# replaces a bundle it made before, and refuses to write into any other non-empty folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/versions.sh
source "$root/scripts/versions.sh"

out=$root/gpu-bundle
build_dir=$root/build
cuda_build_dir=$root/build-cuda
python=$root/.venv/bin/python
die() { echo "gpu_bundle: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --cuda-build-dir) cuda_build_dir=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    *) echo "usage: scripts/gpu_bundle.sh [--out DIR] [--build-dir DIR] [--cuda-build-dir DIR]" \
            "[--python PY]" >&2; exit 2 ;;
  esac
done

binaries=("$cuda_build_dir/bin/ringtrain-trainer" "$cuda_build_dir/bin/ringtrain-gpu-check"
          "$build_dir/bin/ringtrain-run")
for b in "${binaries[@]}"; do
  [ -x "$b" ] || die "$b is missing. HINT: scripts/test.sh builds both builds; by hand:" \
    "BUILD_DIR=build-cuda CMAKE_ARGS='-DRINGTRAIN_CUDA=ON -DRINGTRAIN_BUILD_TESTS=OFF'" \
    "scripts/build.sh --target ringtrain-trainer ringtrain-gpu-check; scripts/build.sh --target ringtrain-run"
done

# The torch the build linked: the .venv's (cmake/torch.cmake takes LibTorch from it).
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) ||
  die "cannot import torch with $python. HINT: scripts/setup.sh fills .venv; or pass --python PY"
torch_cuda=$("$python" -c 'import torch; print(torch.version.cuda)')
case "$torch_version" in
  "$RINGTRAIN_TORCH_VERSION"|"$RINGTRAIN_TORCH_VERSION"+*) ;;
  *) die "$python has torch $torch_version, scripts/versions.sh pins $RINGTRAIN_TORCH_VERSION." \
       "HINT: scripts/setup.sh installs the pinned one" ;;
esac

if [ -e "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -f "$out/MANIFEST" ]; then
  die "$out is not empty and holds no MANIFEST (not a bundle this script made); choose another --out"
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/cxx" "$out/configs" "$out/tests/gpu" "$out/tests/parity"

# Libraries: every path ldd resolves, except LibTorch / CUDA / NVIDIA (the GPU machine's torch
# wheels carry them: anything under a site-packages), glibc's own and the vDSO. The C++ runtime
# goes to lib/cxx (see above).
for b in "${binaries[@]}"; do
  cp "$b" "$out/bin/"
  ldd_out=$(ldd "$b")
  if grep -q "not found" <<<"$ldd_out"; then
    die "$b does not load here:"$'\n'"$(grep "not found" <<<"$ldd_out")"
  fi
  while read -r name path; do
    case "$name" in
      libc.so.*|libm.so.*|libpthread.so.*|librt.so.*|libdl.so.*|libutil.so.*|ld-linux*) continue ;;
      libstdc++.so.*|libgcc_s.so.*) cp -L "$path" "$out/lib/cxx/$name" ;;
      *) case "$path" in
           */site-packages/*) ;;
           /*) cp -L "$path" "$out/lib/$name" ;;
         esac ;;
    esac
  done < <(awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' <<<"$ldd_out")
done

cp "$root"/configs/*.toml "$out/configs/"
cp "$root"/tests/gpu/*.sh "$root"/tests/gpu/*.py "$out/tests/gpu/"
cp "$root/tests/parity/llama_reference.py" "$out/tests/parity/"

commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit (with local changes)"; fi
{
  echo "# ringtrain GPU bundle (scripts/gpu_bundle.sh); tests/gpu/check.sh reads torch_version"
  echo "torch_version=$torch_version"
  echo "torch_cuda=$torch_cuda"
  echo "commit=$commit"
  echo "built_on=$(uname -n) $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "glibc=$(ldd --version | awk 'NR == 1 { print $NF }')"
  echo "# files (bytes, sha256)"
  (cd "$out" && find . -type f ! -name MANIFEST | sort | while read -r f; do
     echo "file=${f#./} $(stat -c %s "$f") $(sha256sum "$f" | cut -d' ' -f1)"
   done)
} > "$out/MANIFEST"

size_kib=$(du -sk "$out" | cut -f1)
echo "gpu_bundle: wrote $out ($(( size_kib / 1024 )) MiB, $(find "$out" -type f | wc -l) files;" \
     "torch $torch_version, CUDA $torch_cuda)"
if [ "$size_kib" -gt $(( 64 * 1024 )) ]; then
  die "$out is $(( size_kib / 1024 )) MiB, over the 64 MiB a bundle may take"
fi
echo "gpu_bundle: copy it to the GPU machine and run: DIR/tests/gpu/check.sh [--python PY] [--device cuda:0]"
