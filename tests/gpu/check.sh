#!/usr/bin/env bash
# The GPU check, on a machine with one NVIDIA GPU and a PyTorch 2.x install (no package manager,
# no network), from a bundle that scripts/gpu_bundle.sh made and that was copied there:
#   DIR/tests/gpu/check.sh [--bundle DIR] [--python PY] [--device cuda:0] [--out OUT] [--self-test]
# 1. finds torch through PY (default python3) and refuses a torch whose major.minor differs from
#    the one the binaries were built against (the bundle's MANIFEST);
# 2. builds the binaries' LD_LIBRARY_PATH: the bundle's lib/, torch/lib, site-packages/nvidia/*/lib,
#    then the LD_LIBRARY_PATH it was given (and the bundle's lib/cxx first when this machine's C++
#    runtime is older than the build machine's),
#    and checks with ldd that every library resolves (naming the ones that do not);
# 3. runs tests/gpu/run_checks.py: attention, the debug config on the device against the CPU (also
#    block-causal documents at cp = 2 against cp = 1 on the CPU), cp = 2 (ring, and ulysses)
#    on the one device against cp = 1, and a larger config's tokens/s and MFU next to PyTorch
#    eager; it prints one table and writes it to OUT/results.{json,md} (default ./gpu-check-out).
# --self-test: the same plumbing with --device cpu and small shapes (CI runs it; < 2 min).
# Exit status: 0 every checked row passed, 1 a row failed or a step crashed, 2 bad command line,
# 3 this machine cannot run the bundle (torch version, missing libraries).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=$(cd "$here/../.." && pwd)
python=python3
device=cuda:0
out=$PWD/gpu-check-out
self_test=()
usage() {
  echo "usage: tests/gpu/check.sh [--bundle DIR] [--python PY] [--device cuda:N|cpu] [--out OUT]" \
       "[--self-test]" >&2
  exit 2
}
refuse() { echo "check.sh: $*" >&2; exit 3; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) [ $# -ge 2 ] || usage; bundle=$2; shift 2 ;;
    --python) [ $# -ge 2 ] || usage; python=$2; shift 2 ;;
    --device) [ $# -ge 2 ] || usage; device=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || usage; out=$2; shift 2 ;;
    --self-test) self_test=(--self-test); shift ;;
    *) usage ;;
  esac
done
case "$device" in cpu|cuda|cuda:[0-9]*) ;; *) echo "check.sh: --device $device is not cpu or cuda:N" >&2; exit 2 ;; esac

manifest=$bundle/MANIFEST
[ -f "$manifest" ] || refuse "$bundle has no MANIFEST: it is not a bundle." \
  "HINT: scripts/gpu_bundle.sh makes one (gpu-bundle/); pass --bundle DIR"
built_torch=$(sed -n 's/^torch_version=//p' "$manifest")
[ -n "$built_torch" ] || refuse "$manifest names no torch_version"

# torch's version and library folders, as the given Python sees them.
torch_info=$("$python" - <<'EOF' 2>&1
import glob, os
import torch
site = os.path.dirname(os.path.dirname(torch.__file__))
print("version=" + torch.__version__)
print("cuda=" + str(torch.version.cuda))
print("lib=" + os.path.join(os.path.dirname(torch.__file__), "lib"))
for d in sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib"))):
    print("lib=" + d)
EOF
) || refuse "$python cannot import torch:"$'\n'"$torch_info"$'\n'"HINT: pass --python PY of the environment that has PyTorch"
have_torch=$(sed -n 's/^version=//p' <<<"$torch_info")
major_minor() { cut -d. -f1,2 <<<"${1%%+*}"; }
if [ "$(major_minor "$have_torch")" != "$(major_minor "$built_torch")" ]; then
  refuse "torch versions differ: the bundle's binaries were built against torch $built_torch," \
    "$python has torch $have_torch (major.minor must match)." \
    "HINT: pass --python PY of a torch $(major_minor "$built_torch").x, or rebuild the bundle against $have_torch"
fi
echo "check.sh: torch $have_torch (CUDA $(sed -n 's/^cuda=//p' <<<"$torch_info")) from $python;" \
     "the bundle was built against $built_torch"

lib_path=$bundle/lib
while read -r d; do lib_path=$lib_path:$d; done < <(sed -n 's/^lib=//p' <<<"$torch_info")
# Then whatever this machine already had there (containers often find the driver's libcuda so).
lib_path=$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# Every library of every binary resolves; "not found" also covers a missing symbol version
# (GLIBCXX_3.4.30 not found), in which case the build machine's C++ runtime is tried.
unresolved() {
  local b
  for b in "$bundle"/bin/*; do
    LD_LIBRARY_PATH=$1 ldd "$b" 2>&1 | grep "not found" | sed "s|^|  $(basename "$b"): |" || true
  done
}
missing=$(unresolved "$lib_path")
if [ -n "$missing" ] && [ -d "$bundle/lib/cxx" ]; then
  if [ -z "$(unresolved "$bundle/lib/cxx:$lib_path")" ]; then
    echo "check.sh: this machine's C++ runtime is older than the build machine's; using the bundle's lib/cxx"
    lib_path=$bundle/lib/cxx:$lib_path
    missing=""
  fi
fi
[ -z "$missing" ] || refuse "the binaries do not load here; missing (LD_LIBRARY_PATH=$lib_path):"$'\n'"$missing"

if command -v nvidia-smi >/dev/null && [ "$device" != cpu ]; then nvidia-smi -L || true; fi
# Only the bundle's binaries get this path (run_checks.py sets it for them); Python's own torch
# keeps loading as it always does.
export RINGTRAIN_BUNDLE_LD_LIBRARY_PATH=$lib_path
exec "$python" "$here/run_checks.py" --bundle "$bundle" --device "$device" --out "$out" \
  ${self_test[@]+"${self_test[@]}"}
