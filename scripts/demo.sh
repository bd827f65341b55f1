#!/usr/bin/env bash
# The main job: trains the debug model (configs/debug_model.toml) and streams the losses.
# Installs what is missing and builds first. Extra arguments are config overrides, e.g.
#   scripts/demo.sh --training.steps=200
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target ringtrain-trainer > build.log 2>&1 || { tail -50 build.log; exit 1; }
exec build/bin/ringtrain-trainer configs/debug_model.toml "$@"
