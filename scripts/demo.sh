#!/usr/bin/env bash
# The main job: trains the debug model (configs/debug_model.toml) with context parallelism on a
# local 2-rank job (ring attention over Gloo, head-tail sharding) and streams the losses.
# Installs what is missing and builds first. Extra arguments are config overrides, e.g.
#   scripts/demo.sh --training.steps=200
# (NPROC=4 scripts/demo.sh runs cp = 4.)
set -euo pipefail
cd "$(dirname "$0")/.."
NPROC=${NPROC:-2}
scripts/setup.sh
echo "demo: building ringtrain-trainer and ringtrain-run (the first build takes several minutes)"
scripts/build.sh --target ringtrain-trainer ringtrain-run > build.log 2>&1 || {
  tail -50 build.log; exit 1; }
exec build/bin/ringtrain-run --nproc "$NPROC" configs/debug_model.toml \
  --parallelism.context_parallel_degree="$NPROC" "$@"
