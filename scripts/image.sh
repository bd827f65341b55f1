#!/usr/bin/env bash
# The ringtrain container images, built and tried with podman or docker (whichever is installed;
# podman from Debian's packages when neither is). No container registry is needed: the Debian 12
# base is made here.
#   scripts/image.sh base              the local Debian 12 base image (debootstrap --variant=minbase
#                                      bookworm, imported), made once and reused: the root
#                                      filesystem's tarball is cached in $RINGTRAIN_IMAGE_CACHE
#                                      (default ~/.cache/ringtrain/image), outside the clone
#   scripts/image.sh build [--cuda]    the image from source (deploy/docker/Dockerfile, or
#                                      Dockerfile.cuda): compiles in a build stage, 22-23 min on 2 cores
#   scripts/image.sh package [--cuda]  the same runtime image from the binaries already built in
#                                      build/ (build-cuda/ for --cuda), compiling nothing (CI)
#   scripts/image.sh smoke [IMAGE]     a coordinator and two workers as containers, a cp=2 job of
#                                      configs/debug_model.toml through ringctl on this machine
#   scripts/image.sh check [IMAGE]     every binary in the image finds its libraries (ldd), uid
#                                      10001, no build tools or .venv (smoke runs it first)
# Environment: RINGTRAIN_ENGINE (podman or docker), RINGTRAIN_IMAGE (default
# localhost/ringtrain:dev; --cuda adds -cuda), BUILD_DIR / CUDA_BUILD_DIR (package, and smoke's
# ringctl), RINGTRAIN_IMAGE_CACHE, RINGTRAIN_DEBIAN_MIRROR (base), RINGTRAIN_CUDA_BASE (an image
# with the CUDA 13.0 toolkit in /usr/local/cuda-13.0, instead of one made from $CUDA_HOME),
# RINGTRAIN_CA_BUNDLE (the CA bundle pip trusts in the build stage), RINGTRAIN_SMOKE_STEPS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
die() { echo "image: $*" >&2; exit 1; }
log() { echo "image: $*" >&2; }

cache=${RINGTRAIN_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ringtrain/image}
base_image=localhost/ringtrain-base:bookworm
debian_mirror=${RINGTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
image=${RINGTRAIN_IMAGE:-localhost/ringtrain:dev}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    die "need root to run: $*"
  fi
}

# engine: podman, or docker when its daemon answers; podman from Debian's packages when neither.
engine=""
pick_engine() {
  [ -n "$engine" ] && return
  case "${RINGTRAIN_ENGINE:-}" in
    podman|docker) engine=$RINGTRAIN_ENGINE ;;
    "") if command -v podman >/dev/null; then engine=podman
        elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then engine=docker
        else
          log "neither podman nor a running docker daemon found: installing podman (Debian package)"
          as_root apt-get update -q
          as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            podman runc
          engine=podman
        fi ;;
    *) die "RINGTRAIN_ENGINE=$RINGTRAIN_ENGINE: use podman or docker" ;;
  esac
  if [ "$engine" = podman ] && [ -z "${CONTAINERS_CONF:-}" ]; then
    # runc, and open-file/process limits the trainers need (deploy/docker/containers.conf says why).
    export CONTAINERS_CONF=$root/deploy/docker/containers.conf
  fi
  if [ "$engine" = docker ]; then
    ctr info >/dev/null 2>&1 ||
      die "docker does not answer (docker info). HINT: start dockerd, or RINGTRAIN_ENGINE=podman"
    # BuildKit (RUN --mount, --secret): built into docker clients up to 22.x, the buildx plugin after.
    local client_major
    client_major=$(ctr version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1)
    if [ "${client_major:-0}" -ge 23 ] && ! ctr buildx version >/dev/null 2>&1; then
      die "$(command -v "${RINGTRAIN_DOCKER:-docker}") (client $client_major.x) has no buildx plugin," \
        "which its BuildKit needs (RUN --mount). HINT: install docker's buildx plugin, or" \
        "RINGTRAIN_DOCKER=/usr/bin/docker (Debian's docker.io client: BuildKit built in), or" \
        "RINGTRAIN_ENGINE=podman"
    fi
  fi
}
# RINGTRAIN_DOCKER: the docker client to use (e.g. Debian's /usr/bin/docker, whose BuildKit is built
# in, where the docker on PATH is a newer client without the buildx plugin).
ctr() { if [ "$engine" = docker ]; then "${RINGTRAIN_DOCKER:-docker}" "$@"; else podman "$@"; fi; }
have_image() { ctr image inspect "$1" >/dev/null 2>&1; }

# ---- base ----------------------------------------------------------------------------------------
cmd_base() {
  pick_engine
  if have_image "$base_image"; then
    log "base: $base_image is there (remove it to make it again: $engine rmi $base_image)"
    return
  fi
  local tarball=$cache/debian-bookworm-minbase.tar
  if [ ! -s "$tarball" ]; then
    command -v debootstrap >/dev/null || {
      log "base: installing debootstrap (Debian package)"
      as_root apt-get update -q
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
    }
    mkdir -p "$cache"
    local rootfs=$cache/rootfs.partial
    as_root rm -rf "$rootfs"
    log "base: debootstrap --variant=minbase bookworm from $debian_mirror into $rootfs"
    as_root debootstrap --variant=minbase bookworm "$rootfs" "$debian_mirror" >"$cache/debootstrap.log" 2>&1 ||
      die "base: debootstrap failed, see $cache/debootstrap.log"
    # The point releases' fixes, as on the machines the binaries are built on; no package lists
    # or downloaded packages kept in the image (the Dockerfiles run apt-get update first).
    as_root tee "$rootfs/etc/apt/sources.list" >/dev/null <<SOURCES
deb $debian_mirror bookworm main
deb $debian_mirror bookworm-updates main
deb ${debian_mirror%/debian}/debian-security bookworm-security main
SOURCES
    as_root chroot "$rootfs" apt-get clean
    as_root rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/*.log
    as_root tar --numeric-owner -C "$rootfs" -cf "$tarball.partial" .
    as_root rm -rf "$rootfs"
    mv "$tarball.partial" "$tarball"
  fi
  log "base: importing $tarball as $base_image"
  ctr import --change 'CMD ["/bin/bash"]' "$tarball" "$base_image" >/dev/null
  log "base: $base_image ($(image_size "$base_image"))"
}

image_size() { ctr image inspect --format '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1 / 1e6}'; }

# ---- the CUDA toolkit the build stages need (LibTorch's CMake config) -----------------------------
# No registry here: the toolkit this machine builds build-cuda/ with ($CUDA_HOME, default
# /usr/local/cuda-13.0) becomes a local image laid out as NVIDIA's (/usr/local/cuda-13.0).
cuda_toolkit_image=localhost/ringtrain-cuda-toolkit:13.0
ensure_cuda_toolkit() {
  if [ -n "${RINGTRAIN_CUDA_BASE:-}" ]; then cuda_toolkit_image=$RINGTRAIN_CUDA_BASE; return; fi
  have_image "$cuda_toolkit_image" && return
  local home=${CUDA_HOME:-/usr/local/cuda-13.0}
  [ -x "$home/bin/nvcc" ] || die "no CUDA toolkit at $home (bin/nvcc). HINT: set CUDA_HOME to a CUDA" \
    "13.0 toolkit, or RINGTRAIN_CUDA_BASE to an image that has one in /usr/local/cuda-13.0" \
    "(e.g. nvidia/cuda:13.0.2-devel-ubuntu24.04 where a registry is reachable)"
  "$home/bin/nvcc" --version | grep -q 'release 13\.0' ||
    die "$home/bin/nvcc is not CUDA 13.0 ($("$home/bin/nvcc" --version | tail -1)): the wheel's LibTorch needs 13.0"
  home=$(cd "$home" && pwd -P)
  log "build: importing the CUDA toolkit $home as $cuda_toolkit_image ($(du -sh "$home" | cut -f1))"
  tar -C "$(dirname "$home")" -c --transform "s,^$(basename "$home"),usr/local/cuda-13.0,rh" \
      "$(basename "$home")" | ctr import - "$cuda_toolkit_image" >/dev/null
}

# podman build / docker build (BuildKit) with the local bases, on the host's network (the build
# stage reaches Debian's mirror and PyPI; no bridge network is needed).
engine_build() {
  local file=$1; shift
  local args=(build --network host -f "$file"
              --build-arg "RUNTIME_BASE=$base_image" --build-arg "BUILD_BASE=$base_image")
  # This machine's trust store, for pip in the build stage (a TLS-intercepting proxy's CA).
  local ca=${RINGTRAIN_CA_BUNDLE:-${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}
  if [ -s "$ca" ]; then args+=(--secret "id=ca-bundle,src=$ca"); fi
  if [ "$engine" = podman ]; then
    # docker format: the OCI format drops SHELL (the Dockerfiles' bash with pipefail).
    args+=(--format docker --ignorefile "$root/$file.dockerignore")
    ctr "${args[@]}" "$@"
  else
    DOCKER_BUILDKIT=1 ctr "${args[@]}" "$@"
  fi
}

parse_cuda() {
  cuda=0
  for arg in "$@"; do
    case "$arg" in --cuda) cuda=1 ;; *) die "unknown argument $arg (expected --cuda)" ;; esac
  done
  dockerfile=deploy/docker/Dockerfile
  tag=$image
  if [ "$cuda" = 1 ]; then dockerfile=deploy/docker/Dockerfile.cuda; tag=$image-cuda; fi
}

# ---- build: from source ---------------------------------------------------------------------------
cmd_build() {
  parse_cuda "$@"
  pick_engine
  cmd_base
  ensure_cuda_toolkit
  local start=$SECONDS
  log "build: $tag from $dockerfile (compiles in the build stage)"
  engine_build "$dockerfile" --build-arg "CUDA_BASE=$cuda_toolkit_image" -t "$tag" .
  log "build: $tag in $((SECONDS - start)) s, $(image_size "$tag")"
}

# ---- package: the runtime image from build/ (and build-cuda/), compiling nothing --------------------
cmd_package() {
  parse_cuda "$@"
  pick_engine
  cmd_base
  local start=$SECONDS
  local build_dir=${BUILD_DIR:-build} cuda_build_dir=${CUDA_BUILD_DIR:-build-cuda}
  local python=$root/.venv/bin/python
  [ -x "$python" ] || die "package: no $python. HINT: scripts/setup.sh, then scripts/build.sh"
  local site
  site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  local work
  work=$(mktemp -d "${TMPDIR:-/tmp}/ringtrain-package.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  local stage_args=(--out "$work/stage" --bin-dir "$build_dir/bin" --site-packages "$site")
  if [ "$cuda" = 1 ]; then stage_args+=(--cuda --trainer-bin-dir "$cuda_build_dir/bin"); fi
  deploy/docker/stage.sh "${stage_args[@]}"
  # The Dockerfile's runtime-base stage, then its last stage's one step (COPY the staged tree to /).
  engine_build "$dockerfile" --target runtime-base -t "$tag-runtime-base" . >"$work/base.log" 2>&1 || {
    cat "$work/base.log" >&2; die "package: the runtime-base stage of $dockerfile failed"; }
  printf 'FROM %s\nCOPY stage/ /\n' "$tag-runtime-base" >"$work/Containerfile"
  local old_id
  old_id=$(ctr image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
  local format=()
  if [ "$engine" = podman ]; then format=(--format docker); fi
  ctr build "${format[@]}" --network none -f "$work/Containerfile" -t "$tag" "$work" >"$work/build.log" 2>&1 || {
    cat "$work/build.log" >&2; die "package: adding the binaries to $tag-runtime-base failed"; }
  # The image this tag named before (each package run makes a new one): removed when nothing else
  # names or uses it, so that CI's runs do not pile up images.
  if [ -n "$old_id" ] && [ "$old_id" != "$(ctr image inspect --format '{{.Id}}' "$tag")" ]; then
    ctr rmi "$old_id" >/dev/null 2>&1 || true
  fi
  local from=$build_dir/
  if [ "$cuda" = 1 ]; then from+=" and $cuda_build_dir/ (ringtrain-trainer)"; fi
  log "package: $tag from $from in $((SECONDS - start)) s, $(image_size "$tag")"
}

# ---- check: what the image holds and runs as --------------------------------------------------------
# Every binary (and, in the CUDA image, every library of the wheel's that LibTorch links) finds
# each library it needs (ldd inside the image), the image runs as uid 10001, holds no compiler,
# build tool or .venv, and the tools start.
cmd_check() {
  pick_engine
  local target=${1:-$image}
  have_image "$target" || die "check: no image $target. HINT: scripts/image.sh package (or build)"
  # shellcheck disable=SC2016  # expanded inside the container
  ctr run --rm --network none "$target" bash -c '
    set -uo pipefail
    bad=0
    fail() { echo "check: $*"; bad=1; }
    [ "$(id -u):$(id -g)" = 10001:10001 ] || fail "runs as $(id -u):$(id -g), not 10001:10001"
    files=(/usr/local/bin/*)
    [ -d /opt/ringtrain/site-packages ] && files+=(/opt/ringtrain/site-packages/torch/lib/libtorch*.so)
    for f in "${files[@]}"; do
      missing=$(ldd "$f" 2>&1 | grep -E "not found|not a dynamic" || true)
      [ -z "$missing" ] || fail "$f: $missing"
    done
    for b in ringtrain-coordinator ringtrain-worker ringtrain-trainer ringtrain-run ringctl \
             ringtrain-tokenize ringtrain-convert ringtrain-health; do
      [ -x "/usr/local/bin/$b" ] || { fail "$b is missing"; continue; }
      "$b" --help >/dev/null 2>&1 || fail "$b --help failed"
    done
    for tool in gcc g++ cc c++ cmake make ld as python3 pip; do
      if command -v "$tool" >/dev/null; then fail "build tool $tool is in the image"; fi
    done
    for dir in /src /src/.venv /usr/include/c++ /usr/local/cuda /usr/local/cuda-13.0; do
      [ -e "$dir" ] && fail "$dir is in the image"
    done
    echo "check: $(ls /usr/local/bin | wc -l) binaries, $(du -sh /opt/ringtrain | cut -f1) of wheel libraries"
    exit $bad'
  log "check: $target passed ($(image_size "$target"))"
}

# ---- smoke: a cluster of containers trains a job -----------------------------------------------------
# A coordinator and two workers, each a container on the host network (ports picked free on
# 127.0.0.1), run as uid 10001 on a read-only root filesystem with no capabilities, with the TLS and token files mounted
# read-only where the Kubernetes Secrets go (deploy/README.md, "Secrets"; workers see only ca.crt
# and join-token). ringctl of this machine's build submits a cp=2 job of configs/debug_model.toml,
# follows it to SUCCEEDED, reads rank 1's log, and both metrics endpoints are scraped. Everything it
# started is removed at the end, whatever happened.
smoke_containers=()
smoke_dir=""
smoke_cleanup() {
  local rc=$?
  if [ "$rc" != 0 ] && [ ${#smoke_containers[@]} -gt 0 ]; then
    for c in "${smoke_containers[@]}"; do
      echo "image: smoke: last lines of $c:" >&2
      ctr logs --tail 30 "$c" 2>&1 | sed 's/^/    /' >&2 || true
    done
  fi
  if [ ${#smoke_containers[@]} -gt 0 ]; then
    local stop=()
    if [ "$engine" = podman ]; then stop=(-t 5); fi  # docker rm -f kills at once
    ctr rm -f "${stop[@]}" "${smoke_containers[@]}" >/dev/null 2>&1 || true
  fi
  [ -n "$smoke_dir" ] && rm -rf "$smoke_dir"
  return "$rc"
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

cmd_smoke() {
  pick_engine
  local target=${1:-$image}
  have_image "$target" || die "smoke: no image $target. HINT: scripts/image.sh package (or build)"
  local ringctl=${BUILD_DIR:-build}/bin/ringctl
  [ -x "$ringctl" ] || die "smoke: $ringctl is missing (ringctl runs on this machine). HINT: scripts/build.sh --target ringctl"
  command -v openssl >/dev/null || die "smoke: needs openssl (Debian package openssl) for its certificates"
  local start=$SECONDS
  cmd_check "$target"

  smoke_dir=$(mktemp -d "${TMPDIR:-/tmp}/ringtrain-smoke.XXXXXX")
  trap smoke_cleanup EXIT
  local d=$smoke_dir
  mkdir -p "$d/tls" "$d/tokens" "$d/worker-tls" "$d/worker-tokens" "$d/checkpoints" "$d/data" \
    "$d/state" "$d/work-0" "$d/work-1"
  # The Secrets' files, as deploy/README.md makes them (a private CA, a server certificate for
  # 127.0.0.1, two random tokens), readable by the container's user like a Secret volume (0644).
  {
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ringtrain-smoke-ca \
      -keyout "$d/ca.key" -out "$d/tls/ca.crt"
    openssl req -newkey rsa:2048 -nodes -subj /CN=ringtrain-coordinator \
      -keyout "$d/tls/tls.key" -out "$d/tls.csr"
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$d/san.cnf"
    openssl x509 -req -in "$d/tls.csr" -CA "$d/tls/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
      -days 2 -extfile "$d/san.cnf" -out "$d/tls/tls.crt"
    openssl rand -hex 32 >"$d/tokens/client-token"
    openssl rand -hex 32 >"$d/tokens/join-token"
  } >"$d/openssl.log" 2>&1 || { cat "$d/openssl.log" >&2; die "smoke: openssl failed"; }
  cp "$d/tls/ca.crt" "$d/worker-tls/"
  cp "$d/tokens/join-token" "$d/worker-tokens/"
  chmod 0644 "$d"/tls/* "$d"/tokens/* "$d"/worker-tls/* "$d"/worker-tokens/*
  # The volumes the pods write (the coordinator's state claim, the workers' /work emptyDirs and
  # the shared checkpoint claim), writable by the pods' user. (Host folders: podman's --tmpfs
  # ignores mode= and uid= on some hosts.)
  chown 10001:10001 "$d/state" "$d/work-0" "$d/work-1" "$d/checkpoints"

  local grpc_port metrics_port w0_metrics w1_metrics
  grpc_port=$(free_port); metrics_port=$(free_port); w0_metrics=$(free_port); w1_metrics=$(free_port)
  local rdv=$((30000 + RANDOM % 2000 * 10))
  local name=ringtrain-smoke-$$
  # As the manifests run them: uid/gid 10001, read-only root, /tmp (and the workers' /work) empty
  # and writable, no capabilities, no privilege escalation.
  local common=(--network host --user 10001:10001 --read-only --cap-drop ALL
                --security-opt no-new-privileges --tmpfs /tmp -e HOME=/tmp -e TMPDIR=/tmp)
  smoke_containers+=("$name-coordinator")
  ctr run -d --name "$name-coordinator" "${common[@]}" -v "$d/state:/var/lib/ringtrain" \
    -v "$d/tls:/etc/ringtrain/tls:ro" -v "$d/tokens:/etc/ringtrain/tokens:ro" \
    "$target" ringtrain-coordinator --listen="127.0.0.1:$grpc_port" \
    --db=/var/lib/ringtrain/ringtrain.db --metrics-address="127.0.0.1:$metrics_port" \
    --rendezvous-ports="$rdv-$((rdv + 9))" \
    --tls-cert=/etc/ringtrain/tls/tls.crt --tls-key=/etc/ringtrain/tls/tls.key \
    --client-token-file=/etc/ringtrain/tokens/client-token \
    --worker-token-file=/etc/ringtrain/tokens/join-token >/dev/null
  # Ready: the probe the manifests can exec answers SERVING (grpc.health.v1 over TLS).
  local tries=0
  until ctr exec "$name-coordinator" ringtrain-health --address "127.0.0.1:$grpc_port" \
      --tls-ca /etc/ringtrain/tls/ca.crt >/dev/null 2>&1; do
    tries=$((tries + 1))
    [ "$tries" -lt 60 ] || die "smoke: the coordinator's health check never said SERVING"
    [ "$(ctr inspect --format '{{.State.Running}}' "$name-coordinator")" = true ] ||
      die "smoke: the coordinator container exited"
    sleep 1
  done
  log "smoke: coordinator SERVING on 127.0.0.1:$grpc_port (ringtrain-health in the container)"
  local i port
  for i in 0 1; do
    port=$w0_metrics; [ "$i" = 1 ] && port=$w1_metrics
    smoke_containers+=("$name-worker-$i")
    ctr run -d --name "$name-worker-$i" "${common[@]}" -v "$d/work-$i:/work" \
      -v "$d/data:/data:ro" -v "$d/checkpoints:/checkpoints" \
      -v "$d/worker-tls:/etc/ringtrain/tls:ro" -v "$d/worker-tokens:/etc/ringtrain/tokens:ro" \
      "$target" ringtrain-worker --coordinator="127.0.0.1:$grpc_port" --device=cpu \
      --host-label="smoke-$i" --advertise-address=127.0.0.1 --work-dir=/work --data-root=/data \
      --checkpoint-root=/checkpoints --threads=1 --metrics-address="127.0.0.1:$port" \
      --tls-ca=/etc/ringtrain/tls/ca.crt --join-token-file=/etc/ringtrain/tokens/join-token >/dev/null
  done

  local client=(--coordinator "127.0.0.1:$grpc_port" --tls-ca "$d/tls/ca.crt"
                --token-file "$d/tokens/client-token")
  "$ringctl" workers "${client[@]}" --wait 2 --timeout 120 >"$d/workers.txt" ||
    { cat "$d/workers.txt" >&2; die "smoke: two workers did not register (ringctl workers --wait 2)"; }
  log "smoke: 2 workers IDLE; submitting configs/debug_model.toml with cp=2"
  "$ringctl" submit "${client[@]}" configs/debug_model.toml --name image-smoke \
    --parallelism.context_parallel_degree=2 --training.steps="${RINGTRAIN_SMOKE_STEPS:-10}" \
    --follow >"$d/submit.txt" 2>&1 ||
    { cat "$d/submit.txt" >&2; die "smoke: the job did not succeed (ringctl submit --follow)"; }
  local job
  job=$(sed -n 's/^submitted \([^ ]*\).*/\1/p' "$d/submit.txt" | head -1)
  [ -n "$job" ] || { cat "$d/submit.txt" >&2; die "smoke: no job id in ringctl submit's output"; }
  "$ringctl" get "${client[@]}" "$job" >"$d/get.txt" 2>&1 || { cat "$d/get.txt" >&2; die "smoke: ringctl get $job failed"; }
  grep -q SUCCEEDED "$d/get.txt" || { cat "$d/get.txt" >&2; die "smoke: $job did not end SUCCEEDED"; }
  log "smoke: $job SUCCEEDED"
  "$ringctl" logs "${client[@]}" "$job" --rank 1 >"$d/rank1.log" 2>&1 ||
    { cat "$d/rank1.log" >&2; die "smoke: ringctl logs $job --rank 1 failed"; }
  grep -q 'trainer exited with status 0' "$d/rank1.log" ||
    { cat "$d/rank1.log" >&2; die "smoke: rank 1's log does not end in its trainer's exit status 0"; }
  log "smoke: rank 1's log: $(wc -l <"$d/rank1.log") lines; last: $(tail -1 "$d/rank1.log")"
  scrape() {  # URL PREFIX
    python3 - "$1" "$2" <<'SCRAPE'
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
lines = [l for l in text.splitlines() if l.startswith(sys.argv[2])]
if not lines:
    sys.exit(f"{sys.argv[1]} has no {sys.argv[2]}* series")
print(len(lines))
SCRAPE
  }
  local n
  n=$(scrape "http://127.0.0.1:$metrics_port/metrics" ringtrain_coordinator_) || die "smoke: coordinator metrics"
  log "smoke: coordinator /metrics: $n ringtrain_coordinator_ lines"
  for i in 0 1; do
    port=$w0_metrics; [ "$i" = 1 ] && port=$w1_metrics
    n=$(scrape "http://127.0.0.1:$port/metrics" ringtrain_worker_) || die "smoke: worker $i metrics"
    log "smoke: worker $i /metrics: $n ringtrain_worker_ lines"
  done
  log "smoke: passed in $((SECONDS - start)) s"
}

sub=${1:-}
[ $# -gt 0 ] && shift
case "$sub" in
  base) cmd_base "$@" ;;
  build) cmd_build "$@" ;;
  package) cmd_package "$@" ;;
  check) cmd_check "$@" ;;
  smoke) cmd_smoke "$@" ;;
  *) echo "usage: scripts/image.sh base|build [--cuda]|package [--cuda]|smoke [IMAGE]|check [IMAGE]" >&2; exit 2 ;;
esac
