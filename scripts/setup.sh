#!/usr/bin/env bash
# Installs everything ringtrain needs to build, test and run:
#   - the Debian 12 packages (compilers, gRPC, protobuf, abseil, prometheus-cpp, SQLite, ...);
#   - LibTorch: PyTorch torch==$RINGTRAIN_TORCH_VERSION from PyPI (built for CUDA 13, so it carries
#     libtorch_cuda, ProcessGroupNCCL and the c10d headers) into the project-local virtual
#     environment .venv/ (git-ignored). CMake takes its prefix from torch.utils.cmake_prefix_path;
#     the parity reference and every Python helper in tests/ run on the same interpreter;
#   - the deploy tests' schema validators (tests/deploy/requirements.txt) and the parity tests'
#     references (tests/parity/requirements.txt: Hugging Face's tokenizers and transformers,
#     TensorBoard's event reader), PyPI, into the same .venv.
# Safe to re-run: it installs only what is missing or at the wrong version. Needs root (or sudo)
# only when a Debian package is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/versions.sh
source "$root/scripts/versions.sh"

PACKAGES=(
  build-essential cmake pkg-config git
  ccache   # scripts/build.sh compiles through it: a rebuild, or CI's clean clone, reuses objects
  python3 python3-venv
  python3-dev   # Python.h: torch.compile (inductor) builds its C++ kernels against it, with g++
                # (build-essential); ringtrain-bench's compiled peer (tests/bench/torch_peer.py)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev prometheus libsqlite3-dev
  libgtest-dev libgmock-dev
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  libpcre2-dev   # the tokenizer's pre-tokenizer patterns (common/tokenizer)
  libxml2-utils
  libgloo-dev   # only Gloo's headers, which c10d's ProcessGroupGloo.hpp includes and the wheel lacks
  clang libclang-rt-14-dev   # the fuzz build (scripts/fuzz.sh): libFuzzer and the sanitizers
  clang-format-14   # scripts/format.sh (scripts/test.sh checks every C++ source is formatted)
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "setup: need root to run: $*" >&2; exit 1
  fi
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} Debian packages are installed"
fi

# kubectl (with its built-in kustomize) renders the deploy overlays; this kind of machine ships it.
if ! command -v kubectl >/dev/null; then
  echo "setup: kubectl not found: the deploy tests (tests/deploy) need kubectl >= 1.27 on PATH" >&2
fi

# The project-local virtual environment: the pinned torch (and numpy, which `import torch` asks for),
# the deploy tests' validators (tests/deploy/requirements.txt) and the parity references
# (tests/parity/requirements.txt); the tests need them, the binaries do not.
venv="$root/.venv"
python=${RINGTRAIN_PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=$(command -v python3)
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating the virtual environment $venv ($("$python" --version))"
  "$python" -m venv "$venv"
fi
requirements=("torch==$RINGTRAIN_TORCH_VERSION" "numpy==$RINGTRAIN_NUMPY_VERSION")
test_requirements=()
for f in "$root/tests/deploy/requirements.txt" "$root/tests/parity/requirements.txt"; do
  if [ -f "$f" ]; then test_requirements+=("$f"); fi
done
wanted=$(printf '%s\n' "${requirements[@]}"; cat "${test_requirements[@]}" /dev/null)
stamp="$venv/.ringtrain-requirements"
have_torch=$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
if [ "${have_torch%%+*}" != "$RINGTRAIN_TORCH_VERSION" ] || [ "$wanted" != "$(cat "$stamp" 2>/dev/null)" ]; then
  if [ "${have_torch%%+*}" != "$RINGTRAIN_TORCH_VERSION" ]; then
    echo "setup: installing torch==$RINGTRAIN_TORCH_VERSION into .venv${have_torch:+ (found $have_torch)}:" \
         "PyPI's CUDA 13 build with its NVIDIA libraries, about 2.8 GB to download, 4.7 GB on disk"
  else
    echo "setup: updating the Python packages in .venv"
  fi
  start=$(date +%s)
  pip_args=(install --quiet --disable-pip-version-check "${requirements[@]}")
  for f in "${test_requirements[@]}"; do pip_args+=(-r "$f"); done
  "$venv/bin/python" -m pip "${pip_args[@]}"
  printf '%s\n' "$wanted" > "$stamp"
  echo "setup: Python packages installed in $(( $(date +%s) - start )) s"
fi
echo "setup: LibTorch $("$venv/bin/python" -c 'import torch; print(torch.__version__, "(CUDA", torch.version.cuda + ")")')" \
     "from $("$venv/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
